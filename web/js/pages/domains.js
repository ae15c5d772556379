// @ts-check
// Sender domains: the list and the add form, and one domain: the DNS records to publish (each name and
// value with a copy button), "Verify now" (asks DNS through svc and shows each record's status), delete.
import { api } from '../api.js'
import { announce, badge, clear, confirmDialog, copyButton, empty, errorBox, h, pageHeader, td, time, table } from '../dom.js'
import { field, form } from '../form.js'

const PURPOSES = { dkim: 'DKIM', return_path: 'Return-Path', spf: 'SPF', dmarc: 'DMARC', receiving: 'Receiving (MX)' }
const PURPOSE_HINTS = {
  dkim: 'the public key that checks svc\'s signature',
  return_path: 'where bounces come back to svc',
  spf: 'lets the relay send for the Return-Path domain',
  dmarc: 'tells mailbox providers what to do with mail that fails (a suggestion)',
  receiving: 'sends mail for any address at this domain to svc (receiving on)',
}
// A record's status, in words: "pending" also covers a check DNS did not answer (svc learned nothing).
const RECORD_STATUS = { verified: 'found', failed: 'not found', pending: 'pending' }
const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/

/**
 * What is wrong with a domain name as typed ('' when it looks fine). The same checks as svc makes, so
 * most mistakes show while typing; svc's own answer still lands beside the field.
 */

/** A name or address of this machine: records that hold one are of no use on the internet. */
const LOOPBACK = /\blocalhost\b|\b127\.\d{1,3}\.\d{1,3}\.\d{1,3}\b|(^|[^:\w])::1\b/i
export function checkDomainName (value) {
  let s = String(value).trim()
  if (s.endsWith('.')) s = s.slice(0, -1)
  if (s === '') return 'Enter the domain you send from, like example.com'
  if (s.length > 253) return `At most 253 characters (${s.length} now)`
  if (/[\s/:@?#\\[\]]/.test(s)) return 'Enter the domain name only, like example.com (no https://, path, port or address)'
  if (/^[0-9.]+$/.test(s)) return 'That is an IP address; enter a domain name'
  let ascii
  try {
    ascii = new URL(`http://${s}/`).hostname
  } catch {
    return 'Enter a valid domain name, like example.com'
  }
  const labels = ascii.split('.')
  if (labels.length < 2) return 'Needs at least two parts, like example.com'
  if (labels.some((l) => !LABEL.test(l))) return 'Each part between dots holds 1 to 63 letters, digits or inner hyphens'
  if (/^[0-9]+$/.test(labels[labels.length - 1])) return 'The last part cannot be all digits'
  return ''
}

function requiredFound (d) {
  const required = d.records.filter((r) => r.required)
  return { found: required.filter((r) => r.status === 'verified').length, of: required.length }
}

export async function list (view, ctx) {
  const listArea = h('section', { class: 'card flush', 'aria-labelledby': 'domains-title' })
  const usage = h('p', { class: 'muted page-sub' })
  const name = field({
    name: 'name', label: 'Domain', placeholder: 'example.com', autocomplete: 'off', spellcheck: 'false', autocapitalize: 'off',
    maxlength: 253, hint: 'The domain of your From addresses. svc makes its DKIM key and lists the DNS records to publish.',
    validate: checkDomainName,
  })
  const add = form({
    fields: [name],
    submitLabel: 'Add domain',
    busyLabel: 'Adding… (making its key)',
    className: 'inline',
    submit: async (values) => {
      const res = await api.post('/api/domains', { name: values.name.trim() })
      add.reset()
      announce(res.message)
      ctx.router.go(`/domains/${encodeURIComponent(res.data.id)}`)
    },
  })

  async function refresh () {
    let domains, account
    try {
      [domains, account] = await Promise.all([api.get('/api/domains'), api.get('/api/account')])
    } catch (err) {
      clear(listArea).append(errorBox(err))
      return
    }
    const limit = account.data.limits.domains
    usage.textContent = limit === undefined
      ? `${domains.data.length} domain${domains.data.length === 1 ? '' : 's'} on the ${account.data.plan} plan.`
      : `${domains.data.length} of ${limit} domain${limit === 1 ? '' : 's'} on the ${account.data.plan} plan.`
    clear(listArea).append(h('div', { class: 'card-head' }, h('h2', { id: 'domains-title', tabindex: '-1' }, 'Your domains')))
    if (domains.data.length === 0) {
      listArea.append(empty('No sender domains yet', 'Add the domain you send from above: svc signs its mail with DKIM once its records are published.'))
      return
    }
    listArea.append(table({ caption: 'Sender domains, newest first', columns: ['Domain', 'Status', 'Required records', 'Last checked', 'Added'], body: h('tbody', {}, domains.data.map((d) => {
        const { found, of } = requiredFound(d)
        return h('tr', { dataset: { domain: d.id, status: d.status } },
          td('Domain', h('a', { href: `#/domains/${encodeURIComponent(d.id)}`, class: 'mono truncate' }, d.name)),
          td('Status', badge(d.status)),
          td('Required records', `${found} of ${of} found`),
          td('Last checked', d.lastCheckedAt ? time(d.lastCheckedAt) : h('span', { class: 'muted' }, 'never')),
          td('Added', time(d.createdAt)),
        )
      })) }))
  }

  view.append(
    pageHeader('Domains', usage),
    h('section', { class: 'card', 'aria-labelledby': 'new-domain' }, h('h2', { id: 'new-domain' }, 'Add a domain'), add.el),
    listArea,
  )
  await refresh()
}

export async function detail (view, ctx) {
  const base = `/api/domains/${encodeURIComponent(ctx.params.id)}`
  let d = (await api.get(base)).data
  const header = h('div', { class: 'stack' })
  const records = h('section', { class: 'card flush', 'aria-labelledby': 'records-title' })
  // What the last check found, for everyone: screen readers hear it when it changes.
  const result = h('p', { class: 'verify-result', role: 'status', 'aria-live': 'polite' })

  const verify = h('button', { type: 'button', class: 'button' }, 'Verify now')
  // Busy, the button stays focusable (aria-disabled, not disabled: a disabled button drops the focus).
  let checking = false
  verify.addEventListener('click', async () => {
    if (checking) return
    checking = true
    verify.setAttribute('aria-disabled', 'true')
    verify.textContent = 'Checking DNS…'
    records.setAttribute('aria-busy', 'true')
    result.className = 'verify-result muted'
    result.textContent = 'Asking DNS for the records…'
    try {
      const res = await api.post(`${base}/verify`)
      d = res.data
      renderHeader()
      renderRecords()
      const { found, of } = requiredFound(d)
      result.className = `verify-result ${d.status === 'verified' ? 'ok-text' : 'muted'}`
      result.textContent = d.status === 'verified'
        ? `Verified: all ${of} required records found. Mail from ${d.name} is now DKIM-signed.`
        : `${res.message}: ${found} of ${of} required records found. DNS changes can take a while to appear; svc checks again every hour.`
    } catch (err) {
      result.className = 'verify-result error-text'
      result.textContent = `The check did not run: ${err.message}`
    } finally {
      checking = false
      verify.removeAttribute('aria-disabled')
      verify.textContent = 'Verify now'
      records.removeAttribute('aria-busy')
    }
  })

  const remove = h('button', { type: 'button', class: 'button danger-outline' }, 'Delete')
  remove.addEventListener('click', async () => {
    if (!await confirmDialog({
      title: `Delete ${d.name}?`,
      body: `Its DKIM key is deleted with it, so mail from ${d.name} is no longer signed${d.status === 'verified' ? ' and, where verified domains are required, is refused' : ''}. Adding it again makes a new key, with new records to publish. This cannot be undone.`,
      confirmLabel: 'Delete domain',
    })) return
    try {
      await api.del(base)
      announce(`${d.name} deleted`)
      ctx.router.go('/domains')
    } catch (err) { announce(err.message, 'danger') }
  })

  // Receiving: mail to any address at the domain arrives as email.received (and on the Received page).
  const receiving = h('button', { type: 'button', class: 'button secondary' })
  const receivingLabel = () => { receiving.textContent = d.receiving ? 'Turn receiving off' : 'Turn receiving on' }
  receivingLabel()
  receiving.addEventListener('click', async () => {
    try {
      const res = await api.patch(base, { receiving: !d.receiving })
      d = res.data
      receivingLabel()
      renderHeader()
      renderRecords()
      announce(res.message)
    } catch (err) { announce(err.message, 'danger') }
  })

  function renderHeader () {
    clear(header).append(...[
      h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: '#/domains' }, 'Domains'), ' / ', h('span', { class: 'mono' }, d.name)),
      pageHeader(d.name, badge(d.status), h('p', { class: 'muted page-sub' },
        'Added ', time(d.createdAt), '. Last checked ', d.lastCheckedAt ? time(d.lastCheckedAt) : 'never',
        d.verifiedAt ? [', verified ', time(d.verifiedAt)] : null, '.')),
      d.status === 'failed'
        ? h('p', { class: 'alert tone-warn' }, 'A required record is gone since this domain was verified: publish it again, then verify.')
        : null,
      // In development (PUBLIC_URL and INBOUND_MX_HOST unset) the records name this machine: nobody else can reach it.
      d.records.some((r) => LOOPBACK.test(`${r.name} ${r.value}`))
        ? h('p', { class: 'alert tone-warn', dataset: { warning: 'localhost' } },
          'Some of these records point at this machine (localhost): published as they are, no mail server can reach it. ',
          'Set PUBLIC_URL and INBOUND_MX_HOST to the names svc is reached at before publishing them.')
        : null,
    ].filter(Boolean))
  }

  function renderRecords () {
    clear(records).append(
      h('div', { class: 'card-head' }, h('h2', { id: 'records-title', tabindex: '-1' }, 'DNS records to publish')),
      h('p', { class: 'muted small card-note' },
        'Publish these at your DNS provider, then press Verify now. Pending: not checked yet, or DNS did not answer. ',
        'Not found: DNS has no such record, or a different value.'),
      table({ caption: `DNS records for ${d.name}`, columns: ['Type', 'Name', 'Value', 'Priority', 'Purpose', 'Required', 'Status'], className: 'dns-records', body: h('tbody', {}, d.records.map((r) => {
          const what = `${PURPOSES[r.purpose] ?? r.purpose} record`
          return h('tr', { dataset: { purpose: r.purpose, status: r.status } },
            td('Type', h('code', {}, r.type)),
            td('Name', h('div', { class: 'dns-cell' }, h('code', { class: 'dns-text' }, r.name), copyButton(() => r.name, `${what} name`))),
            td('Value', h('div', { class: 'dns-cell' }, h('code', { class: 'dns-text dns-value' }, r.value), copyButton(() => r.value, `${what} value`))),
            td('Priority', r.priority !== undefined ? String(r.priority) : h('span', { class: 'muted' }, '—')),
            td('Purpose', h('span', { title: PURPOSE_HINTS[r.purpose] ?? '' }, PURPOSES[r.purpose] ?? r.purpose)),
            td('Required', r.required ? 'required' : h('span', { class: 'muted' }, 'suggested')),
            td('Status', badge(r.status === 'verified' ? 'verified' : r.status, RECORD_STATUS[r.status] ?? r.status)),
          )
        })) }),
    )
  }

  renderHeader()
  renderRecords()
  // The buttons and the result stay put when the header is drawn again, so focus stays on the button.
  view.append(header,
    h('div', { class: 'verify-bar' }, h('div', { class: 'toolbar', role: 'group', 'aria-label': 'Domain actions' }, verify, receiving, remove), result),
    records)
}
