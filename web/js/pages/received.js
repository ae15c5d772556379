// @ts-check
// Received mail: the list (filtered by recipient, paged) and one message: its fields, the sender's
// SPF, DKIM and DMARC verdicts, its text, its attachments and the raw message as downloads, and delete
// (after a confirmation), which frees its bytes. The html part is never rendered here: it is shown as
// source text (a message's html may hold anything).
import { api, query } from '../api.js'
import { announce, badge, confirmDialog, empty, h, pageHeader, td, time, table } from '../dom.js'
import { field, rules } from '../form.js'
import { morePages } from '../pager.js'

const PAGE = 25

function verdict (name, value) {
  const tone = value === 'pass' ? 'verified' : value === 'none' || value === null ? 'pending' : 'failed'
  return h('span', { class: 'verdict' }, `${name} `, badge(tone, value ?? 'none'))
}

function size (bytes) {
  return bytes < 1024 ? `${bytes} B` : bytes < 1024 * 1024 ? `${(bytes / 1024).toFixed(1)} KiB` : `${(bytes / 1024 / 1024).toFixed(1)} MiB`
}

export async function list (view, ctx) {
  const q = ctx.query
  const fTo = field({
    name: 'to', label: 'Recipient', type: 'email', value: q.to ?? '', placeholder: 'support@example.com', autocomplete: 'off',
    validate: (v) => (v.trim() === '' ? '' : rules.email(v)),
  })
  const filterForm = h('form', { class: 'filters', role: 'search', 'aria-label': 'Filter received mail', novalidate: true },
    fTo.wrap, h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'button' }, 'Filter'), h('a', { href: '#/received', class: 'button secondary' }, 'Clear')))
  filterForm.addEventListener('submit', (event) => {
    event.preventDefault()
    fTo.touch()
    if (!fTo.check()) return
    ctx.router.go('/received', { to: fTo.value().trim() })
  })
  const params = { to: (q.to ?? '').trim(), limit: PAGE }
  const first = await api.get(`/api/received${query(params)}`)
  const results = h('section', { class: 'card flush', 'aria-label': 'Received mail' })
  const count = h('p', { class: 'muted', role: 'status' })
  view.append(pageHeader('Received', h('p', { class: 'muted page-sub' },
    'Mail to your domains with receiving on (Domains → a domain → Receiving), newest first. Each message is also an email.received webhook.')),
  filterForm, count, results)
  if (first.data.length === 0) {
    results.append(params.to
      ? empty('Nothing received at this address', 'Check the address, or clear the filter.')
      : empty('No mail received yet', 'Turn receiving on for a verified domain and publish its MX record: mail to any address there arrives here.'))
    return
  }
  const body = h('tbody', {})
  const addRows = (items) => {
    for (const m of items) {
      body.append(h('tr', { dataset: { received: m.id } },
        td('Received', time(m.createdAt)),
        td('To', h('span', { class: 'truncate mono' }, m.recipients.join(', '))),
        td('From', h('span', { class: 'truncate' }, m.from)),
        td('Subject', h('a', { href: `#/received/${encodeURIComponent(m.id)}` }, m.subject || '(no subject)')),
        td('Sender checks', h('span', {}, verdict('DMARC', m.authentication.dmarc))),
      ))
    }
  }
  addRows(first.data)
  results.append(table({ caption: 'Received mail, newest first', columns: ['Received', 'To', 'From', 'Subject', 'Sender checks'], body: body }))
  morePages({ results, count, first, noun: 'message', load: (cursor) => api.get(`/api/received${query({ ...params, cursor })}`), addRows })
}

export async function detail (view, ctx) {
  const base = `/api/received/${encodeURIComponent(ctx.params.id)}`
  const m = (await api.get(base)).data
  const row = (k, v) => [h('dt', {}, k), h('dd', {}, v)]
  const list = (xs) => (xs.length ? xs.join(', ') : h('span', { class: 'muted' }, '—'))
  const a = m.authentication
  const remove = h('button', { type: 'button', class: 'button danger-outline' }, 'Delete')
  remove.addEventListener('click', async () => {
    if (!await confirmDialog({
      title: 'Delete this message?',
      body: `The message, its raw copy and its attachments are deleted, and its ${size(m.size)} no longer count toward your plan's storage. This cannot be undone.`,
      confirmLabel: 'Delete message',
    })) return
    try {
      await api.del(base)
      announce('Message deleted')
      ctx.router.go('/received')
    } catch (err) { announce(err.message, 'danger') }
  })
  view.append(
    h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: '#/received' }, 'Received'), ' / ', h('span', { class: 'mono' }, m.id)),
    pageHeader(m.subject || '(no subject)', h('p', { class: 'muted page-sub' }, 'Received ', time(m.createdAt), ` at ${m.recipients.join(', ')}.`)),
    h('div', { class: 'grid-2' },
      h('section', { class: 'card', 'aria-labelledby': 'received-fields' },
        h('h2', { id: 'received-fields' }, 'Message'),
        h('dl', { class: 'fields' },
          row('ID', h('span', { class: 'mono' }, m.id)),
          row('From', m.from),
          row('Envelope sender', m.mailFrom || h('span', { class: 'muted' }, '(null sender)')),
          row('To', list(m.to)),
          m.cc.length ? row('Cc', list(m.cc)) : null,
          row('Message-ID', h('span', { class: 'mono' }, m.messageId ?? '—')),
          row('In reply to', m.inReplyTo ? h('a', { href: `#/emails/${encodeURIComponent(m.inReplyTo)}`, class: 'mono' }, m.inReplyTo) : h('span', { class: 'muted' }, '—')),
          row('Size', size(m.size)),
          row('Sender checks', h('span', {}, verdict('SPF', a.spf), ' ', verdict('DKIM', a.dkim), ' ', verdict('DMARC', a.dmarc), a.arc ? [' ', verdict('ARC', a.arc)] : null)),
        ),
        h('div', { class: 'toolbar' }, h('a', { class: 'button secondary', href: `${base}/raw`, download: `${m.id}.eml` }, 'Download the raw message'), remove),
      ),
      h('section', { class: 'card', 'aria-labelledby': 'received-attachments' },
        h('h2', { id: 'received-attachments' }, 'Attachments'),
        m.attachments.length === 0
          ? empty('No attachments', '')
          : h('ul', { class: 'plain-list' }, m.attachments.map((x) => h('li', {},
            h('a', { href: `${base}/attachments/${encodeURIComponent(x.id)}`, download: x.filename ?? x.id }, x.filename ?? x.id),
            h('span', { class: 'muted small' }, ` ${x.contentType}, ${size(x.size)}`)))),
      ),
    ),
    h('section', { class: 'card', 'aria-labelledby': 'received-text' },
      h('h2', { id: 'received-text' }, 'Text'),
      m.text === null ? empty('No text part', m.html === null ? '' : 'This message has an html part only (below, as source).') : h('pre', { class: 'message-text' }, m.text),
      m.textTruncated ? h('p', { class: 'muted small' }, 'Cut here: the whole message is in the raw download.') : null,
    ),
    m.html === null
      ? null
      : h('details', { class: 'card' }, h('summary', {}, 'HTML source (not rendered)'), h('pre', { class: 'message-text' }, m.html),
        m.htmlTruncated ? h('p', { class: 'muted small' }, 'Cut here: the whole message is in the raw download.') : null),
  )
}
