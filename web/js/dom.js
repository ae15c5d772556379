// @ts-check
// Small DOM helpers: build elements without innerHTML (nothing from the API is ever parsed as markup),
// format times and numbers, badges, copy buttons, the confirmation dialog and the status announcer.

/**
 * h('button', { class: 'button', type: 'button', onclick: fn, 'aria-label': '…' }, 'text', child…)
 * Props: `class`, `text`, `on<event>` handlers, `dataset`, booleans (true sets, false leaves out), and
 * anything else as an attribute. Children: nodes, strings, numbers, arrays; null and false are skipped.
 */
export function h (tag, props = {}, ...children) {
  const svg = tag.startsWith('svg:')
  const el = svg ? document.createElementNS('http://www.w3.org/2000/svg', tag.slice(4)) : document.createElement(tag)
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue
    if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value)
    else if (key === 'text') el.textContent = String(value)
    else if (key === 'dataset') Object.assign(el.dataset, value)
    else if (key === 'value' && !svg) el.value = value
    else if (key === 'checked' && !svg) el.checked = Boolean(value)
    else el.setAttribute(key, value === true ? '' : String(value))
  }
  append(el, children)
  return el
}

function append (el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue
    if (Array.isArray(child)) append(el, child)
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)))
  }
}

export function clear (el) {
  while (el.firstChild) el.firstChild.remove()
  return el
}

let uid = 0
/** A unique id for label/aria wiring. */
export function newId (prefix = 'id') {
  uid += 1
  return `${prefix}-${uid}`
}

const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' })
const shortDate = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric' })
const compact = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit' })
const number = new Intl.NumberFormat()

export function fmtTime (iso) {
  if (!iso) return '—'
  return dateTime.format(new Date(iso))
}

/**
 * A <time> with the full ISO value for machines and a local, readable one for people; `short` leaves
 * out the year (for dense tables).
 */
export function time (iso, { short = false } = {}) {
  if (!iso) return h('span', { class: 'muted' }, '—')
  return h('time', { datetime: iso, title: iso }, short ? compact.format(new Date(iso)) : fmtTime(iso))
}

export function fmtDay (day) {
  return shortDate.format(new Date(`${day}T00:00:00Z`))
}

export function fmtNumber (n) {
  return number.format(n)
}

/** A fraction as a percentage: 0.0123 → "1.23 %"; null → "—". */
export function fmtRate (r, digits = 2) {
  if (r === null || r === undefined) return '—'
  return `${(r * 100).toFixed(digits)} %`
}

// Each status maps to a tone; the text always says the status too (never colour alone).
const TONES = {
  active: 'ok', enabled: 'ok', verified: 'ok', delivered: 'ok', succeeded: 'ok',
  queued: 'info', scheduled: 'info', canceled: 'neutral', pending: 'info', deferred: 'warn', retrying: 'warn', partially_delivered: 'warn', disabled: 'neutral',
  revoked: 'neutral', cancelled: 'neutral', auto_disabled: 'danger', bounced: 'danger', failed: 'danger',
  complained: 'danger', unsubscribed: 'warn', manual: 'neutral',
  'email.sent': 'info', 'email.delivered': 'ok', 'email.opened': 'info', 'email.clicked': 'info',
  'email.bounced': 'danger', 'email.complained': 'danger', 'email.unsubscribed': 'warn',
}

export function label (status) {
  return String(status).replace(/^email\./, '').replace(/_/g, ' ')
}

export function badge (status, text = label(status)) {
  return h('span', { class: `badge tone-${TONES[status] ?? 'neutral'}` }, text)
}

/** @type {ReturnType<typeof setTimeout> | undefined} */
let toastTimer

/** Politely tells screen readers (and shows, briefly) what just happened. */
export function announce (message, tone = 'ok') {
  const toast = document.getElementById('toast')
  if (!toast) return
  toast.className = `toast show tone-${tone}`
  clearTimeout(toastTimer)
  if (tone === 'danger') {
    // An error stays until it is dismissed: read at one's own pace, not gone after five seconds.
    clear(toast).append(h('span', {}, message),
      h('button', { type: 'button', class: 'button ghost small toast-close', onclick: () => { toast.className = 'toast'; clear(toast) } }, 'Dismiss'))
    return
  }
  toast.textContent = message
  toastTimer = setTimeout(() => { toast.className = 'toast' }, 5000)
}

async function copyText (text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text)
    return
  }
  // Plain http on a non-local host has no clipboard API: copy through a selected, off-screen field.
  const field = h('textarea', { class: 'offscreen', readonly: true, 'aria-hidden': 'true' })
  field.value = text
  document.body.append(field)
  field.select()
  const ok = document.execCommand('copy')
  field.remove()
  if (!ok) throw new Error('copy refused')
}

export function copyButton (getText, what = 'value') {
  const button = h('button', { type: 'button', class: 'button small secondary', 'aria-label': `Copy ${what}` }, 'Copy')
  button.addEventListener('click', async () => {
    try {
      await copyText(getText())
      button.textContent = 'Copied'
      announce(`Copied the ${what} to the clipboard`)
      setTimeout(() => { button.textContent = 'Copy' }, 2000)
    } catch {
      announce(`Could not copy: select the ${what} and copy it by hand`, 'danger')
    }
  })
  return button
}

/**
 * A secret shown once: the value in a read-only field, a copy button and the warning. `onDone` runs
 * when the person says they have kept it.
 */
export function secretPanel ({ title, value, what, warning, onDone }) {
  const fieldId = newId('secret')
  const input = h('input', { id: fieldId, class: 'mono', type: 'text', readonly: true, value, spellcheck: 'false', autocomplete: 'off' })
  const done = h('button', { type: 'button', class: 'button' }, 'I have copied it')
  const panel = h('section', { class: 'secret-panel', role: 'region', 'aria-labelledby': `${fieldId}-title` },
    h('h2', { id: `${fieldId}-title`, tabindex: '-1' }, title),
    h('p', { class: 'warning', id: `${fieldId}-warning` }, warning),
    h('label', { for: fieldId, class: 'visually-hidden' }, what),
    h('div', { class: 'copy-row' }, input, copyButton(() => value, what)),
    h('div', { class: 'actions' }, done),
  )
  input.setAttribute('aria-describedby', `${fieldId}-warning`)
  input.addEventListener('focus', () => input.select())
  done.addEventListener('click', () => { panel.remove(); onDone?.() })
  return panel
}

/**
 * Asks before something that cannot be undone, in a real modal <dialog> (focus stays inside, Escape
 * cancels). Resolves true when confirmed.
 */
export function confirmDialog ({ title, body, confirmLabel = 'Confirm', danger = true }) {
  return new Promise((resolve) => {
    const titleId = newId('dialog-title')
    const bodyId = newId('dialog-body')
    const cancel = h('button', { type: 'button', class: 'button secondary', value: 'cancel' }, 'Cancel')
    const confirm = h('button', { type: 'submit', class: `button ${danger ? 'danger' : ''}`, value: 'confirm' }, confirmLabel)
    const form = h('form', { method: 'dialog' },
      h('h2', { id: titleId }, title),
      h('p', { id: bodyId }, body),
      h('div', { class: 'actions' }, cancel, confirm),
    )
    const dialog = h('dialog', { class: 'dialog', 'aria-labelledby': titleId, 'aria-describedby': bodyId }, form)
    const opener = document.activeElement
    cancel.addEventListener('click', () => dialog.close('cancel'))
    dialog.addEventListener('close', () => {
      const ok = dialog.returnValue === 'confirm'
      dialog.remove()
      if (opener instanceof HTMLElement && opener.isConnected) opener.focus()
      resolve(ok)
    })
    document.body.append(dialog)
    dialog.showModal()
    cancel.focus()
  })
}

export function loading (text = 'Loading…') {
  return h('p', { class: 'loading', role: 'status' }, h('span', { class: 'spinner', 'aria-hidden': 'true' }), text)
}

export function empty (title, hint) {
  return h('div', { class: 'empty' }, h('p', { class: 'empty-title' }, title), hint ? h('p', { class: 'muted' }, hint) : null)
}

export function errorBox (err) {
  return h('div', { class: 'alert tone-danger', role: 'alert' }, err?.message ?? String(err))
}

/** A page heading that takes focus when the page changes (screen readers announce it). */
export function pageHeader (title, ...extra) {
  return h('div', { class: 'page-header' }, h('h1', { tabindex: '-1', class: 'page-title' }, title), ...extra)
}

/**
 * The dashboard's one table builder: a table with a caption for screen readers, header cells for
 * `columns`, and its rows — `rows` (row elements), or `body`, a tbody the caller keeps to add rows to.
 * @param {{ caption: string, columns: Array<string | Node>, rows?: Node[], body?: HTMLElement, className?: string }} spec
 */
export function table ({ caption, columns, rows = [], body, className = '' }) {
  return h('div', { class: 'table-wrap' },
    h('table', { class: className ? `table ${className}` : 'table' },
      h('caption', { class: 'visually-hidden' }, caption),
      h('thead', {}, h('tr', {}, columns.map((c) => h('th', { scope: 'col' }, c)))),
      body ?? h('tbody', {}, rows),
    ),
  )
}

/** A data cell that names its column, so narrow screens can show each row as a card. */
export function td (column, ...content) {
  return h('td', { 'data-label': column }, ...content)
}
