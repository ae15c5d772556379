// @ts-check
// Webhooks: the list and the create form (URL and an event picker; the secret shown once), and one
// webhook: edit (its filter too), enable or disable, rotate the secret, send a test event, delete, and its
// delivery log (filtered by status, each attempt's answer, retry one, recover the failed ones since a time,
// replay a window).
import { api, query } from '../api.js'
import { announce, badge, clear, confirmDialog, empty, errorBox, h, label, newId, pageHeader, secretPanel, td, time, table } from '../dom.js'
import { checkboxGroup, field, form, isoToLocal, localToIso, rules } from '../form.js'
import { morePages } from '../pager.js'
import { EVENT_TYPES } from '../events.js'


const DELIVERY_STATUSES = ['pending', 'succeeded', 'retrying', 'failed', 'cancelled']
const PAGE = 20

function eventPicker (checked) {
  return field({
    name: 'events', label: 'Events',
    control: checkboxGroup({ legend: 'Events to send', name: 'events', options: EVENT_TYPES.map((t) => ({ value: t, label: t })), checked }),
    validate: rules.someChecked('event'),
  })
}

export async function list (view) {
  const secretArea = h('div', {})
  const listArea = h('section', { class: 'card flush', 'aria-labelledby': 'hooks-title' })
  const usage = h('p', { class: 'muted page-sub' })
  const url = field({
    name: 'url', label: 'Endpoint URL', type: 'url', placeholder: 'https://example.com/webhooks/svc', autocomplete: 'off',
    hint: 'svc POSTs signed JSON events here. https only in production.', validate: rules.url,
  })
  const events = eventPicker(['email.delivered', 'email.bounced', 'email.complained'])
  const create = form({
    fields: [url, events],
    submitLabel: 'Create webhook',
    busyLabel: 'Creating…',
    submit: async (values) => {
      const res = await api.post('/api/webhooks', { url: values.url.trim(), events: values.events })
      create.reset()
      clear(secretArea).append(secretPanel({
        title: 'Your webhook\'s signing secret',
        value: res.data.secret,
        what: 'signing secret',
        warning: 'Copy it now: it verifies our signatures and will not be shown again (you can rotate it later).',
        onDone: () => listArea.querySelector('a')?.focus(),
      }))
      secretArea.querySelector('h2').focus()
      announce('Webhook created. Copy its secret now.')
      await refresh()
    },
  })

  async function refresh () {
    let hooks, account
    try {
      [hooks, account] = await Promise.all([api.get('/api/webhooks'), api.get('/api/account')])
    } catch (err) {
      clear(listArea).append(errorBox(err))
      return
    }
    usage.textContent = `${account.data.usage.webhooks} of ${account.data.limits.webhooks} webhooks on the ${account.data.plan} plan.`
    clear(listArea).append(h('div', { class: 'card-head' }, h('h2', { id: 'hooks-title' }, 'Your webhooks')))
    if (hooks.data.length === 0) {
      listArea.append(empty('No webhooks yet', 'Create one above to receive delivery events.'))
      return
    }
    listArea.append(table({ caption: 'Webhooks, newest first', columns: ['Endpoint', 'Events', 'Status', 'Created'], body: h('tbody', {}, hooks.data.map((w) => h('tr', {},
        td('Endpoint', h('a', { href: `#/webhooks/${encodeURIComponent(w.id)}`, class: 'mono truncate' }, w.url)),
        td('Events', h('span', { class: 'muted small' }, w.events.map(label).join(', '))),
        td('Status', badge(w.status)),
        td('Created', time(w.createdAt)),
      ))) }))
  }

  view.append(
    pageHeader('Webhooks', usage),
    secretArea,
    h('section', { class: 'card', 'aria-labelledby': 'new-hook' }, h('h2', { id: 'new-hook' }, 'Add a webhook'), create.el),
    listArea,
  )
  await refresh()
}

export async function detail (view, ctx) {
  const id = ctx.params.id
  const base = `/api/webhooks/${encodeURIComponent(id)}`
  let w = (await api.get(base)).data
  const header = h('div', { class: 'stack' })
  const secretArea = h('div', {})

  function renderHeader () {
    const toggle = h('button', { type: 'button', class: 'button secondary' }, w.status === 'enabled' ? 'Disable' : 'Enable')
    toggle.addEventListener('click', async () => {
      const next = w.status === 'enabled' ? 'disabled' : 'enabled'
      if (next === 'disabled' && !await confirmDialog({
        title: 'Disable this webhook?', body: 'No events are sent to it while it is disabled. You can enable it again at any time.',
        confirmLabel: 'Disable', danger: false,
      })) return
      try {
        w = (await api.patch(base, { status: next })).data
        renderHeader()
        announce(`Webhook ${next}`)
        header.querySelector('button')?.focus()
      } catch (err) { announce(err.message, 'danger') }
    })
    const rotate = h('button', { type: 'button', class: 'button secondary' }, 'Rotate secret')
    rotate.addEventListener('click', async () => {
      if (!await confirmDialog({
        title: 'Rotate the signing secret?',
        body: 'A new secret signs every delivery from now on; the current one keeps signing beside it for 24 hours, so you can switch your receiver over.',
        confirmLabel: 'Rotate', danger: false,
      })) return
      try {
        const res = await api.post(`${base}/rotate-secret`)
        clear(secretArea).append(secretPanel({
          title: 'The new signing secret',
          value: res.data.secret,
          what: 'signing secret',
          warning: `Copy it now: it will not be shown again. The previous secret keeps signing until ${new Date(res.data.previousSecretExpiresAt).toLocaleString()}.`,
          onDone: () => rotate.focus(),
        }))
        secretArea.querySelector('h2').focus()
        announce('Secret rotated')
      } catch (err) { announce(err.message, 'danger') }
    })
    const remove = h('button', { type: 'button', class: 'button danger-outline' }, 'Delete')
    remove.addEventListener('click', async () => {
      if (!await confirmDialog({
        title: 'Delete this webhook?', body: `${w.url} gets no more events, and its pending deliveries are cancelled. This cannot be undone.`,
        confirmLabel: 'Delete webhook',
      })) return
      try {
        await api.del(base)
        announce('Webhook deleted')
        ctx.router.go('/webhooks')
      } catch (err) { announce(err.message, 'danger') }
    })
    clear(header).append(...[
      h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: '#/webhooks' }, 'Webhooks'), ' / ', h('span', { class: 'mono' }, w.id)),
      pageHeader(w.url, badge(w.status), h('p', { class: 'muted page-sub' }, `Sends ${w.events.join(', ')}${filterText(w.filter)}`)),
      h('p', { class: 'muted small', dataset: { delivery: 'state' } }, deliveryText(w)),
      w.status === 'auto_disabled'
        ? h('p', { class: 'alert tone-warn' }, 'svc disabled this webhook after it failed without a single success for days. Fix the endpoint, then enable it.')
        : null,
      h('div', { class: 'toolbar', role: 'group', 'aria-label': 'Webhook actions' }, toggle, rotate, remove),
    ].filter(Boolean))
  }
  renderHeader()

  // Edit: URL, events and the rate limit.
  const url = field({ name: 'url', label: 'Endpoint URL', type: 'url', value: w.url, autocomplete: 'off', validate: rules.url })
  const events = eventPicker(w.events)
  const rateLimit = field({
    name: 'rateLimit', label: 'Rate limit (deliveries per second)', type: 'number', min: '1', max: '10000', step: '1', inputmode: 'numeric',
    value: w.rateLimit === null || w.rateLimit === undefined ? '' : String(w.rateLimit),
    hint: 'Empty: no limit; svc finds the pace your endpoint can take by itself. A limit holds across every svc node.',
    validate: rateLimitRule,
  })
  const filterDomains = field({
    name: 'filterDomains', label: 'Only mail from these domains', autocomplete: 'off', placeholder: 'shop.example.com, news.example.com',
    value: (w.filter?.domains ?? []).join(', '),
    hint: 'The From address\'s domain, exactly (a subdomain is another domain). Empty: every domain. At most 20.',
    validate: listRule(20, DOMAIN, 'a domain name like example.com'),
  })
  const filterTags = field({
    name: 'filterTags', label: 'Only mail with one of these tags', autocomplete: 'off', placeholder: 'kind:receipt, tenant',
    value: (w.filter?.tags ?? []).map((t) => t.value === undefined ? t.name : `${t.name}:${t.value}`).join(', '),
    hint: 'name (any value) or name:value. Empty: tagged or not. With domains too, both must match. At most 20.',
    validate: listRule(20, TAG, 'name or name:value (letters, digits, _ and -)'),
  })
  const edit = form({
    fields: [url, events, rateLimit, filterDomains, filterTags],
    submitLabel: 'Save changes',
    busyLabel: 'Saving…',
    submit: async (values) => {
      const limit = String(values.rateLimit).trim()
      const domains = listOf(values.filterDomains)
      const tags = listOf(values.filterTags).map((t) => {
        const colon = t.indexOf(':')
        return colon < 0 ? { name: t } : { name: t.slice(0, colon), value: t.slice(colon + 1) }
      })
      w = (await api.patch(base, {
        url: values.url.trim(), events: values.events, rateLimit: limit === '' ? null : Number(limit),
        filter: domains.length === 0 && tags.length === 0 ? null : { domains, tags },
      })).data
      renderHeader()
      announce('Webhook saved')
    },
  })

  // Test event.
  const testType = h('select', { name: 'event' }, EVENT_TYPES.map((t) => h('option', { value: t }, t)))
  const testField = field({ name: 'event', label: 'Event type', control: testType })
  const test = form({
    fields: [testField],
    submitLabel: 'Send test event',
    busyLabel: 'Sending…',
    className: 'inline',
    submit: async (values) => {
      const res = await api.post(`${base}/test`, { event: values.event })
      announce(res.message)
      await log.reload()
    },
  })

  // Recover: failed deliveries since a time.
  const since = field({
    name: 'since', label: 'Failed since', type: 'datetime-local', value: isoToLocal(new Date(Date.now() - 86_400_000).toISOString()),
    validate: (v) => (!v ? 'Pick a start time' : localToIso(v) >= new Date().toISOString() ? 'Pick a time in the past' : ''),
  })
  const recover = form({
    fields: [since],
    submitLabel: 'Send them again',
    busyLabel: 'Queueing…',
    className: 'inline',
    submit: async (values) => {
      const res = await api.post(`${base}/recover`, { since: localToIso(values.since) })
      announce(res.message)
      await log.reload()
    },
  })

  // Replay: every delivery of a window again, delivered ones included (at most 7 days, until now at the latest).
  const replaySince = field({
    name: 'since', label: 'From', type: 'datetime-local', value: isoToLocal(new Date(Date.now() - 86_400_000).toISOString()),
    validate: (v) => (!v ? 'Pick a start time' : localToIso(v) >= new Date().toISOString() ? 'Pick a time in the past' : ''),
  })
  const replayUntil = field({
    name: 'until', label: 'Until', type: 'datetime-local', hint: 'Empty: now.',
    validate: (v) => (v && localToIso(v) > new Date().toISOString() ? 'Pick a time that has passed, or leave it empty' : ''),
  })
  const replay = form({
    fields: [replaySince, replayUntil],
    submitLabel: 'Replay',
    busyLabel: 'Queueing…',
    className: 'inline',
    submit: async (values) => {
      const res = await api.post(`${base}/replay`, { since: localToIso(values.since), ...(values.until ? { until: localToIso(values.until) } : {}) })
      announce(res.message)
      await log.reload()
    },
  })

  const log = deliveryLog(base, ctx)
  view.append(
    header,
    secretArea,
    log.el,
    h('div', { class: 'grid-2' },
      h('section', { class: 'card', 'aria-labelledby': 'test-title' },
        h('h2', { id: 'test-title' }, 'Send a test event'),
        h('p', { class: 'muted' }, 'A signed delivery of a made-up event, to this webhook only.'),
        test.el),
      h('section', { class: 'card', 'aria-labelledby': 'recover-title' },
        h('h2', { id: 'recover-title' }, 'Recover failed deliveries'),
        h('p', { class: 'muted' }, 'Back from an outage? Every delivery that failed since then goes out again.'),
        recover.el),
      h('section', { class: 'card', 'aria-labelledby': 'replay-title' },
        h('h2', { id: 'replay-title' }, 'Replay deliveries'),
        h('p', { class: 'muted' }, 'Lost some data? Every delivery of that time goes out again, delivered ones too, under the same delivery ids (at most 7 days at once).'),
        replay.el),
    ),
    h('section', { class: 'card', 'aria-labelledby': 'edit-title' }, h('h2', { id: 'edit-title' }, 'Settings'), edit.el),
  )
  await log.reload()
}

/** The delivery log: a status filter, a paged table, retry per row. */
function deliveryLog (base, ctx) {
  const statusId = newId('dl-status')
  const status = h('select', { id: statusId, name: 'status' },
    h('option', { value: '' }, 'All'), DELIVERY_STATUSES.map((s) => h('option', { value: s }, label(s))))
  status.value = DELIVERY_STATUSES.includes(ctx.query.status) ? ctx.query.status : ''
  const refreshButton = h('button', { type: 'button', class: 'button small secondary' }, 'Refresh')
  const area = h('div', {})
  const count = h('p', { class: 'muted small', role: 'status' })
  const el = h('section', { class: 'card flush', 'aria-labelledby': 'log-title' },
    h('div', { class: 'card-head' },
      h('h2', { id: 'log-title' }, 'Delivery log'),
      h('div', { class: 'head-controls' },
        h('label', { for: statusId }, 'Status'), status, refreshButton)),
    count,
    area,
  )

  function row (d) {
    const retry = h('button', { type: 'button', class: 'button small secondary', 'aria-label': `Retry delivery ${d.id}` }, 'Retry')
    retry.addEventListener('click', async () => {
      retry.disabled = true
      try {
        const res = await api.post(`${base}/deliveries/${encodeURIComponent(d.id)}/retry`)
        const fresh = row(res.data)
        tr.replaceWith(fresh)
        // Focus stays on this delivery's row (its button is gone while it is pending), not on <body>.
        fresh.focus()
        announce('Delivery queued again')
        setTimeout(() => { if (el.isConnected) reload({ keepFocus: true }) }, 1500)
      } catch (err) {
        retry.disabled = false
        announce(err.message, 'danger')
      }
    })
    const tr = h('tr', { dataset: { delivery: d.id, status: d.status }, tabindex: '-1', 'aria-label': `${label(d.event)} delivery ${d.id}, ${label(d.status)}` },
      td('Event', h('div', {}, badge(d.event)), h('a', { href: `#/emails/${encodeURIComponent(d.emailId)}`, class: 'mono small muted id-link' }, d.emailId)),
      td('Status', badge(d.status)),
      td('Attempts', String(d.attempts)),
      td('Last attempt', d.lastAttemptAt ? time(d.lastAttemptAt, { short: true }) : h('span', { class: 'muted' }, 'not yet')),
      td('Answer', d.lastStatusCode !== null ? h('code', { class: d.lastStatusCode < 300 ? 'code-ok' : 'code-bad' }, String(d.lastStatusCode)) : h('span', { class: 'muted' }, '—')),
      td('Duration', d.lastDurationMs !== null ? `${Math.round(d.lastDurationMs)} ms` : h('span', { class: 'muted' }, '—')),
      td('Error', d.lastError ? h('span', { class: 'error-text' }, d.lastError) : h('span', { class: 'muted' }, '—')),
      td('Next try', d.nextAttemptAt ? time(d.nextAttemptAt, { short: true }) : h('span', { class: 'muted' }, '—')),
      td('Actions', d.status === 'succeeded' || d.status === 'pending' ? null : retry),
    )
    return tr
  }

  async function reload ({ keepFocus = false } = {}) {
    const active = keepFocus ? document.activeElement : null
    const focusedRow = active instanceof HTMLElement ? /** @type {HTMLElement | null} */ (active.closest('tr[data-delivery]'))?.dataset.delivery : undefined
    let page
    try {
      page = await api.get(`${base}/deliveries${query({ status: status.value, limit: PAGE })}`)
    } catch (err) {
      clear(area).append(errorBox(err))
      return
    }
    clear(area)
    if (page.data.length === 0) {
      count.textContent = ''
      area.append(status.value ? empty(`No ${label(status.value)} deliveries`) : empty('No deliveries yet', 'Send a test event, or an email with an event this webhook listens to.'))
      return
    }
    const body = h('tbody', {}, page.data.map(row))
    area.append(table({ caption: 'Deliveries, newest first', columns: ['Event', 'Status', 'Attempts', 'Last attempt', 'Answer', 'Duration', 'Error', 'Next try', h('span', { class: 'visually-hidden' }, 'Actions')], className: 'deliveries', body: body }))
    morePages({
      results: area, count, first: page, noun: 'delivery', plural: 'deliveries',
      load: (after) => api.get(`${base}/deliveries${query({ status: status.value, limit: PAGE, cursor: after })}`),
      addRows: (rows) => body.append(...rows.map(row)),
    })
    if (active instanceof HTMLElement && !active.isConnected) {
      const again = focusedRow && [...body.querySelectorAll('tr[data-delivery]')].find((r) => r.dataset.delivery === focusedRow)
      if (again) again.focus()
      else el.querySelector('h2')?.focus()
    }
  }

  status.addEventListener('change', () => {
    history.replaceState(null, '', `#${ctx.path}${status.value ? `?status=${status.value}` : ''}`)
    reload()
  })
  refreshButton.addEventListener('click', () => reload())
  return { el, reload }
}

const DOMAIN = /^[^\s,@/:]+\.[^\s,@/:]+$/
const TAG = /^[A-Za-z0-9_-]{1,256}(:[A-Za-z0-9_-]{1,256})?$/

/** A comma- or space-separated list as typed, without empty items. */
function listOf (v) {
  return String(v).split(/[\s,]+/).filter((x) => x !== '')
}

/** A list of at most `max` items, each matching `pattern`. */
function listRule (max, pattern, what) {
  return (v) => {
    const items = listOf(v)
    if (items.length > max) return `At most ${max} (${items.length} now)`
    const bad = items.find((x) => !pattern.test(x))
    return bad === undefined ? '' : `"${bad.slice(0, 60)}" is not ${what}`
  }
}

/** The filter in words, after "Sends …"; empty when none. */
function filterText (filter) {
  if (!filter) return ''
  const parts = []
  if (filter.domains.length > 0) parts.push(`from ${filter.domains.join(', ')}`)
  if (filter.tags.length > 0) parts.push(`tagged ${filter.tags.map((t) => t.value === undefined ? t.name : `${t.name}:${t.value}`).join(' or ')}`)
  return `, only for mail ${parts.join(' and ')}`
}

/** A rate limit as typed: empty (none) or a whole number from 1 to 10000, as the API takes it. */
function rateLimitRule (v) {
  const s = String(v).trim()
  if (s === '') return ''
  return /^[0-9]{1,5}$/.test(s) && Number(s) >= 1 && Number(s) <= 10000 ? '' : 'A whole number from 1 to 10000, or empty for none'
}

/** The adaptive delivery state as the API gives it (on the node that answered), in a sentence. */
function deliveryText (w) {
  const limit = w.rateLimit ? `Rate limit ${w.rateLimit}/s. ` : 'No rate limit. '
  const d = w.delivery
  if (!d) return `${limit}Not delivering right now.`
  const breaker = d.breaker === 'closed' ? '' : d.breaker === 'open' ? ' The endpoint seems down: svc probes it and sends the rest when it answers.' : ' Probing the endpoint.'
  return `${limit}Sending up to ${d.window} at once (about ${d.roundTripMs} ms each).${breaker}`
}
