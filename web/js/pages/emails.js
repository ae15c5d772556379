// @ts-check
// Emails: the list (filtered by status, recipient and date, paged) and one email with its timeline; a
// scheduled email can be canceled from its page.
import { api, query } from '../api.js'
import { announce, badge, clear, confirmDialog, empty, h, label, pageHeader, td, time, table } from '../dom.js'
import { morePages } from '../pager.js'
import { field, rules } from '../form.js'

const STATUSES = ['scheduled', 'queued', 'deferred', 'delivered', 'bounced', 'partially_delivered', 'failed', 'canceled']
// Every event an email can have: a complaint or an open happens on a delivered email, so the status alone never finds it.
const EVENTS = ['email.sent', 'email.delivered', 'email.bounced', 'email.opened', 'email.clicked', 'email.complained', 'email.unsubscribed']
const PAGE = 25

/** An email's status, said as the sandbox's when nothing left the machine. */
function statusBadge (status, ctx) {
  return ctx.sandbox && status === 'delivered' ? badge(status, 'Delivered (sandbox)') : badge(status)
}

/** "2026-01-02" (a date input, local) → the ISO start of that local day; until is the next day's start. */
function dayStart (value, plusDays = 0) {
  if (!value) return ''
  const [y, m, d] = value.split('-').map(Number)
  return new Date(y, m - 1, d + plusDays).toISOString()
}

export async function list (view, ctx) {
  const q = ctx.query
  const status = h('select', { name: 'status' },
    h('option', { value: '' }, 'Any status'),
    STATUSES.map((s) => h('option', { value: s }, label(s))))
  status.value = STATUSES.includes(q.status) ? q.status : ''
  const fStatus = field({ name: 'status', label: 'Status', control: status })
  const event = h('select', { name: 'event' },
    h('option', { value: '' }, 'Any event'),
    EVENTS.map((e) => h('option', { value: e }, label(e))))
  event.value = EVENTS.includes(q.event) ? q.event : ''
  const fEvent = field({ name: 'event', label: 'Had event', control: event })
  const fTo = field({
    name: 'to', label: 'Recipient', type: 'email', value: q.to ?? '', placeholder: 'name@example.com', autocomplete: 'off',
    validate: (v) => (v.trim() === '' ? '' : rules.email(v)),
  })
  const fSince = field({ name: 'since', label: 'From', type: 'date', value: q.since ?? '' })
  const fUntil = field({
    name: 'until', label: 'To', type: 'date', value: q.until ?? '',
    validate: (v) => (v && fSince.value() && v < fSince.value() ? 'Pick a day on or after the start' : ''),
  })
  const filters = [fStatus, fEvent, fTo, fSince, fUntil]
  const apply = h('button', { type: 'submit', class: 'button' }, 'Filter')
  const reset = h('a', { href: '#/emails', class: 'button secondary' }, 'Clear')
  const filterForm = h('form', { class: 'filters filters-5', role: 'search', 'aria-label': 'Filter emails', novalidate: true },
    filters.map((f) => f.wrap), h('div', { class: 'actions' }, apply, reset))
  filterForm.addEventListener('submit', (event) => {
    event.preventDefault()
    if (!filters.every((f) => { f.touch(); return f.check() })) return
    ctx.router.go('/emails', { status: fStatus.value(), event: fEvent.value(), to: fTo.value().trim(), since: fSince.value(), until: fUntil.value() })
  })

  const params = {
    status: status.value, event: event.value, to: (q.to ?? '').trim(), since: dayStart(q.since), until: dayStart(q.until, 1), limit: PAGE,
  }
  const first = await api.get(`/api/emails${query(params)}`)
  const filtered = Boolean(params.status || params.event || params.to || params.since || params.until)
  const results = h('section', { class: 'card flush', 'aria-label': 'Emails' })
  const count = h('p', { class: 'muted', role: 'status' })
  view.append(pageHeader('Emails', h('p', { class: 'muted page-sub' }, 'Newest first. Click an email for its timeline.')), filterForm, count, results)

  if (first.data.length === 0) {
    count.textContent = ''
    results.append(filtered
      ? empty('No email matches these filters', 'Change or clear the filters.')
      : empty('No emails yet', h('span', {}, 'Send one with an ', h('a', { href: '#/keys' }, 'API key'), ': POST /api/send (see ', h('a', { href: '/docs' }, '/docs'), ').')))
    return
  }
  const body = h('tbody', {})
  const addRows = (items) => {
    for (const e of items) {
      body.append(h('tr', {},
        td('Created', time(e.createdAt)),
        td('To', h('span', { class: 'truncate' }, e.to.join(', '))),
        td('Subject', h('a', { href: `#/emails/${encodeURIComponent(e.id)}` }, e.subject)),
        td('Status', statusBadge(e.status, ctx), e.status === 'scheduled' && e.scheduledAt ? h('div', { class: 'muted small' }, 'for ', time(e.scheduledAt)) : null),
      ))
    }
  }
  addRows(first.data)
  results.append(table({ caption: 'Emails, newest first', columns: ['Created', 'To', 'Subject', 'Status'], body: body }))
  morePages({ results, count, first, noun: 'email', load: (cursor) => api.get(`/api/emails${query({ ...params, cursor })}`), addRows })
}

export async function detail (view, ctx) {
  const path = `/api/emails/${encodeURIComponent(ctx.params.id)}`
  const e = (await api.get(path)).data
  const row = (k, v) => [h('dt', {}, k), h('dd', {}, v)]
  const list = (xs) => (xs.length ? xs.join(', ') : h('span', { class: 'muted' }, '—'))
  const onOff = (on) => (on ? 'on' : 'off')
  const metadata = Object.entries(e.metadata ?? {})
  let cancel = null
  if (e.status === 'scheduled') {
    cancel = h('button', { type: 'button', class: 'button danger-outline' }, 'Cancel email')
    cancel.addEventListener('click', async () => {
      if (!await confirmDialog({
        title: 'Cancel this email?', body: `It is not sent at ${new Date(e.scheduledAt).toLocaleString()}, nor ever. This cannot be undone.`,
        confirmLabel: 'Cancel email', danger: true,
      })) return
      try {
        await api.post(`${path}/cancel`)
        announce('Email canceled')
        clear(view)
        await detail(view, ctx)
      } catch (err) { announce(err.message, 'danger') }
    })
  }
  view.append(
    h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: '#/emails' }, 'Emails'), ' / ', h('span', { class: 'mono' }, e.id)),
    pageHeader(e.subject, statusBadge(e.status, ctx), cancel),
    h('div', { class: 'grid-2' },
      h('section', { class: 'card', 'aria-labelledby': 'email-fields' },
        h('h2', { id: 'email-fields' }, 'Message'),
        h('dl', { class: 'fields' },
          row('ID', h('span', { class: 'mono' }, e.id)),
          row('From', e.from),
          row('To', list(e.to)),
          e.cc.length ? row('Cc', list(e.cc)) : null,
          e.bcc.length ? row('Bcc', list(e.bcc)) : null,
          e.replyTo.length ? row('Reply-To', list(e.replyTo)) : null,
          row('Created', time(e.createdAt)),
          e.scheduledAt ? row(e.status === 'scheduled' ? 'Scheduled for' : 'Scheduled', time(e.scheduledAt)) : null,
          e.tracking ? row('Tracking', `opens ${onOff(e.tracking.opens)}, clicks ${onOff(e.tracking.clicks)}, unsubscribe link ${onOff(e.unsubscribe)}`) : null,
          metadata.length ? row('Metadata', h('span', {}, metadata.map(([k, v]) => h('span', { class: 'tag' }, `${k}: ${v}`)))) : null,
          e.tags.length ? row('Tags', h('span', {}, e.tags.map((t) => h('span', { class: 'tag' }, `${t.name}: ${t.value}`)))) : null,
          e.attachments?.length ? row('Attachments', attachments(e.attachments)) : null,
          e.template ? row('Template', h('a', { href: `#/templates/${encodeURIComponent(e.template.id)}?version=${e.template.version}`, class: 'mono' }, `version ${e.template.version}`)) : null,
          e.suppressed.length ? row('Suppressed', list(e.suppressed)) : null,
        ),
      ),
      h('section', { class: 'card', 'aria-labelledby': 'email-timeline' },
        h('h2', { id: 'email-timeline' }, 'Timeline'),
        e.events.length === 0
          ? empty('No events', 'Events are kept for RETENTION_DAYS; older ones are pruned.')
          : h('ol', { class: 'timeline' }, e.events.map((ev) => h('li', { class: 'timeline-item' },
            h('span', { class: 'timeline-dot', 'aria-hidden': 'true' }),
            h('div', {}, ctx.sandbox && ev.type === 'email.delivered' ? badge(ev.type, 'Delivered (sandbox)') : badge(ev.type), ' ', h('span', { class: 'recipient' }, ev.recipient)),
            ev.reason ? h('div', { class: 'reason' }, `Reason: ${ev.reason}`) : null,
            h('div', { class: 'muted small' }, time(ev.occurredAt)),
          ))),
      ),
    ),
    content(e),
  )
}

/** A size in bytes, for people. */
function bytes (n) {
  if (n < 1024) return `${n} B`
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`
  return `${(n / 1024 / 1024).toFixed(1)} MB`
}

/**
 * The email's files as it keeps them (their bytes are dropped a while after it was sent): name, size,
 * type, inline or not, and the SHA-256 to compare with a copy.
 */
function attachments (list) {
  return h('ul', { class: 'plain-list' }, list.map((a) => h('li', {},
    h('span', { class: 'mono' }, a.filename), ' ',
    h('span', { class: 'muted small' }, `${bytes(a.size)}, ${a.contentType}${a.contentId ? `, inline (cid:${a.contentId})` : ''}`), ' ',
    h('span', { class: 'mono muted small', title: `SHA-256 ${a.sha256}` }, `sha256 ${a.sha256.slice(0, 12)}…`),
  )))
}

/**
 * The message as it was sent: the html in a frame that runs no script and, under the dashboard's
 * Content-Security-Policy (which an srcdoc frame inherits), loads nothing from anywhere; and the text.
 */
function content (e) {
  const parts = []
  if (e.html !== null) {
    parts.push(h('h3', {}, 'HTML'), h('iframe', { class: 'message-frame', sandbox: '', title: `The HTML of ${e.subject}`, srcdoc: e.html, referrerpolicy: 'no-referrer' }))
  }
  if (e.text !== null) parts.push(h('h3', {}, 'Text'), h('pre', { class: 'message-text', tabindex: '0', 'aria-label': 'The text version' }, e.text))
  return h('section', { class: 'card', 'aria-labelledby': 'email-content' },
    h('h2', { id: 'email-content' }, 'As sent'),
    h('p', { class: 'muted small' }, 'As the API took it, before each recipient\'s tracking and unsubscribe link.'),
    parts)
}
