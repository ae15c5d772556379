// @ts-check
// Forms: labelled fields that validate as they are typed, and the API's own messages shown beside the
// field they name (error.details[].path, like "body.email" or "body.events[1]").
import { ApiError } from './api.js'
import { h, newId } from './dom.js'

/**
 * A labelled field. `name` is the API's field name (details `body.<name>` land here); `validate(value)`
 * returns a message or '' and runs as the person types (once they have left the field or submitted).
 * `control` may be given (a <select>, a fieldset of checkboxes); else an <input> of `type`.
 */
/**
 * @typedef {object} FieldSpec
 * @property {string} name
 * @property {string} label
 * @property {string} [type] the input's type; default text
 * @property {string} [hint] shown under the label, and read with the field
 * @property {(value: string, form?: HTMLFormElement) => string} [validate] '' when fine, else what is wrong
 * @property {HTMLElement} [control] a ready-made control instead of an input
 * @property {string | number | boolean} [value]
 */

/** @param {FieldSpec & Record<string, unknown>} spec */
export function field ({ name, label, type = 'text', hint, validate, control, ...attrs }) {
  const id = newId(`f-${name}`)
  const errorId = `${id}-error`
  const hintId = `${id}-hint`
  const input = control ?? h('input', { id, name, type, ...attrs })
  if (!control) input.id = id
  else if (!input.id) input.id = id
  const error = h('p', { class: 'field-error', id: errorId, hidden: true })
  const described = [hint ? hintId : null, errorId].filter(Boolean).join(' ')
  input.setAttribute('aria-describedby', described)
  const isGroup = input.tagName === 'FIELDSET'
  const wrap = h('div', { class: 'field', dataset: { field: name } },
    isGroup ? null : h('label', { for: input.id }, label),
    input,
    hint ? h('p', { class: 'hint', id: hintId }, hint) : null,
    error,
  )
  let touched = false
  const state = {
    name,
    wrap,
    input,
    value: () => (isGroup
      ? [...input.querySelectorAll('input[type=checkbox]:checked')].map((c) => c.value)
      : input.value),
    setError (message) {
      error.textContent = message
      error.hidden = !message
      wrap.classList.toggle('invalid', Boolean(message))
      if (isGroup) input.setAttribute('aria-invalid', message ? 'true' : 'false')
      else input.setAttribute('aria-invalid', message ? 'true' : 'false')
    },
    check () {
      const message = validate ? validate(state.value()) : ''
      state.setError(message || '')
      return !message
    },
    touch () { touched = true },
    /** Back to untouched: an emptied field is not an error until it is used again. */
    untouch () { touched = false; state.setError('') },
  }
  const live = () => { if (touched) state.check() }
  input.addEventListener('input', live)
  input.addEventListener('change', () => { touched = true; state.check() })
  input.addEventListener('blur', (e) => {
    // A group is left when focus goes outside it, not from one checkbox to the next.
    if (isGroup && input.contains(e.relatedTarget)) return
    // A field left empty before anything was typed is not an error yet; submitting says so.
    if (state.value() !== '' && state.value().length !== 0) { touched = true; state.check() } else if (touched) state.check()
  }, true)
  return state
}

/**
 * Wires a <form>: on submit every field is checked; if all pass, `submit(values)` runs with the button
 * disabled. An ApiError's details go to their fields, its message to the form's alert.
 */
export function form ({ fields, submit, submitLabel, busyLabel = 'Working…', className = '', extra = [] }) {
  const alert = h('div', { class: 'alert tone-danger', role: 'alert', hidden: true })
  const button = h('button', { type: 'submit', class: 'button' }, submitLabel)
  const el = h('form', { class: `form ${className}`, novalidate: true },
    alert,
    fields.map((f) => f.wrap),
    h('div', { class: 'actions' }, button, ...extra),
  )
  const byName = new Map(fields.map((f) => [f.name, f]))

  function showAlert (message) {
    alert.textContent = message
    alert.hidden = !message
  }

  el.addEventListener('submit', async (event) => {
    event.preventDefault()
    showAlert('')
    let firstBad = null
    for (const f of fields) {
      f.touch()
      if (!f.check() && !firstBad) firstBad = f
    }
    if (firstBad) {
      focusField(firstBad)
      return
    }
    const values = Object.fromEntries(fields.map((f) => [f.name, f.value()]))
    button.disabled = true
    const label = button.textContent
    button.textContent = busyLabel
    el.setAttribute('aria-busy', 'true')
    try {
      await submit(values, el)
    } catch (err) {
      if (!(err instanceof ApiError)) throw err
      let placed = null
      for (const d of err.details) {
        const name = fieldOf(d.path)
        const f = byName.get(name)
        if (f) {
          f.setError(`${capitalise(name)} ${d.message}`)
          placed ??= f
        }
      }
      showAlert(err.message)
      if (placed) focusField(placed)
    } finally {
      button.disabled = false
      button.textContent = label
      el.removeAttribute('aria-busy')
    }
  })
  return { el, fields: byName, showAlert, reset () { el.reset(); showAlert(''); for (const f of fields) f.untouch() } }
}

/** "body.events[1]" → "events"; "query.since" → "since". */
function fieldOf (path) {
  const rest = String(path).replace(/^(body|query|params|querystring)\.?/, '')
  return rest.split(/[.[]/)[0]
}

function capitalise (s) {
  return s.charAt(0).toUpperCase() + s.slice(1)
}

function focusField (f) {
  const target = f.input.tagName === 'FIELDSET' ? f.input.querySelector('input') : f.input
  target?.focus()
}

// Validators: each returns '' when fine, or what is wrong.
export const rules = {
  required: (what) => (v) => (String(v).trim() === '' ? `Enter ${what}` : ''),
  email: (v) => {
    const s = String(v).trim()
    if (s === '') return 'Enter an email address'
    if (s.length > 254) return 'At most 254 characters'
    return /^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(s) ? '' : 'Enter an address like name@example.com'
  },
  password: (v) => (v.length < 10 ? `At least 10 characters (${10 - v.length} more)` : v.length > 200 ? 'At most 200 characters' : ''),
  length: (min, max, what) => (v) => {
    const s = String(v).trim()
    if (s.length < min) return min === 1 ? `Enter ${what}` : `At least ${min} characters`
    return s.length > max ? `At most ${max} characters (${s.length} now)` : ''
  },
  url: (v) => {
    const s = String(v).trim()
    if (s === '') return 'Enter the URL of your endpoint'
    if (s.length > 2048) return 'At most 2048 characters'
    try {
      const u = new URL(s)
      if (u.protocol !== 'https:' && u.protocol !== 'http:') return 'Use an https:// URL'
      if (u.username || u.password) return 'No user name or password in the URL'
      return ''
    } catch {
      return 'Enter a full URL, like https://example.com/webhooks'
    }
  },
  someChecked: (what) => (v) => (v.length === 0 ? `Pick at least one ${what}` : ''),
}

/** A fieldset of checkboxes (the webhook event picker). */
export function checkboxGroup ({ legend, name, options, checked = [] }) {
  const legendId = newId('legend')
  return h('fieldset', { class: 'checks', name, 'aria-labelledby': legendId },
    h('legend', { id: legendId }, legend),
    options.map((o) => {
      const id = newId(`${name}-opt`)
      return h('div', { class: 'check' },
        h('input', { type: 'checkbox', id, name, value: o.value, checked: checked.includes(o.value) }),
        h('label', { for: id }, o.label),
      )
    }),
  )
}

/** "2026-01-02T03:04" (a datetime-local value, local time) → ISO UTC; '' stays ''. */
export function localToIso (value) {
  if (!value) return ''
  const d = new Date(value)
  return Number.isNaN(d.getTime()) ? '' : d.toISOString()
}

/** ISO → a datetime-local value in local time. */
export function isoToLocal (iso) {
  const d = new Date(iso)
  const pad = (n) => String(n).padStart(2, '0')
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`
}
