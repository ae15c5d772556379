// @ts-check
// The overview: the last 30 days of mail (sent and events per day), the delivery, bounce and complaint
// rates beside the lines mailbox providers draw, and the webhooks that need attention.
import { api, query } from '../api.js'
import { badge, empty, errorBox, fmtDay, fmtNumber, fmtRate, h, label, pageHeader } from '../dom.js'
import { SENT_EVENT_TYPES } from '../events.js'

// The chart draws four series; the table under it has them all.
const BARS = [
  { type: 'email.sent', name: 'Sent' },
  { type: 'email.delivered', name: 'Delivered' },
  { type: 'email.opened', name: 'Opened' },
  { type: 'email.bounced', name: 'Bounced' },
]

const SERIES = [
  { type: 'email.sent', name: 'Sent' },
  { type: 'email.delivered', name: 'Delivered' },
  { type: 'email.opened', name: 'Opened' },
  { type: 'email.clicked', name: 'Clicked' },
  { type: 'email.bounced', name: 'Bounced' },
  { type: 'email.complained', name: 'Complained' },
]

export async function render (view) {
  const [stats, hooks] = await Promise.all([api.get(`/api/stats${query({})}`), api.get('/api/webhooks')])
  const s = stats.data
  view.append(
    pageHeader('Overview', h('p', { class: 'muted page-sub' }, `Last 30 days, ${fmtDay(s.daily[0].day)} to today (UTC days)`)),
    metrics(s),
    h('section', { class: 'card', 'aria-labelledby': 'chart-title' },
      h('div', { class: 'card-head' }, h('h2', { id: 'chart-title' }, 'Emails and events per day')),
      s.totals['email.sent'] === 0 && s.totals['email.delivered'] === 0
        ? empty('Nothing sent in the last 30 days', h('span', {},
          'Create an ', h('a', { href: '#/keys' }, 'API key'), ', then POST /api/send (every route is in the ', h('a', { href: '/docs' }, 'API documentation at /docs'), '). ',
          'To try it, send to delivered@simulator.test, bounced@simulator.test or complained@simulator.test: they act out each outcome and reach nobody.'))
        : chart(s.daily),
    ),
    h('div', { class: 'grid-2' }, totalsCard(s), await webhooksCard(hooks.data)),
  )
}

/**
 * @param {string} title
 * @param {unknown} value
 * @param {{ note?: string, tone?: string, id?: string }} [options]
 */
function metric (title, value, { note, tone, id } = {}) {
  return h('div', { class: `metric ${tone ? `tone-${tone}` : ''}`, role: 'group', 'aria-labelledby': id },
    h('p', { class: 'metric-title', id }, title),
    h('p', { class: 'metric-value' }, value),
    note ? h('p', { class: 'metric-note' }, note) : null,
  )
}

/** ok under `warn`, warn up to `limit`, danger from it. */
function toneOf (rate, t) {
  if (rate === null) return undefined
  return rate >= t.limit ? 'danger' : rate >= t.warn ? 'warn' : 'ok'
}

function metrics (s) {
  const { rates, thresholds: t, totals } = s
  return h('section', { class: 'metrics', 'aria-label': 'Key figures' },
    metric('Emails sent', fmtNumber(totals['email.sent']), { id: 'm-sent', note: 'one per recipient' }),
    metric('Delivery success', fmtRate(rates.deliveryRate, 1), {
      id: 'm-delivery', note: 'delivered ÷ (delivered + bounced)',
      tone: rates.deliveryRate === null ? undefined : rates.deliveryRate >= 0.95 ? 'ok' : 'warn',
    }),
    metric('Bounce rate', fmtRate(rates.bounceRate), {
      id: 'm-bounce', tone: toneOf(rates.bounceRate, t.bounceRate),
      note: `keep under ${fmtRate(t.bounceRate.warn, 0)}; providers act at ${fmtRate(t.bounceRate.limit, 0)}`,
    }),
    metric('Complaint rate', fmtRate(rates.complaintRate), {
      id: 'm-complaint', tone: toneOf(rates.complaintRate, t.complaintRate),
      note: `keep under ${fmtRate(t.complaintRate.warn, 1)}; never reach ${fmtRate(t.complaintRate.limit, 1)}`,
    }),
  )
}

/** A bar chart in SVG, one group of bars per day (no library, no inline style: colours come from app.css). */
function chart (daily) {
  const W = 760
  const H = 240
  const pad = { l: 36, r: 8, t: 10, b: 26 }
  const max = Math.max(1, ...daily.flatMap((d) => BARS.map((s) => d[s.type])))
  const step = niceStep(max / 4)
  const top = Math.ceil(max / step) * step
  const slot = (W - pad.l - pad.r) / daily.length
  const gap = Math.max(1, slot * 0.22)
  const barW = (slot - gap) / BARS.length
  const y = (v) => pad.t + (H - pad.t - pad.b) * (1 - v / top)
  const ticks = []
  for (let v = 0; v <= top; v += step) ticks.push(v)
  const labelDays = [0, Math.floor((daily.length - 1) / 2), daily.length - 1].filter((v, i, a) => a.indexOf(v) === i)
  const svg = h('svg:svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-labelledby': 'chart-desc' },
    h('svg:desc', { id: 'chart-desc' }, `Emails sent, delivered, opened and bounced per day over ${daily.length} days; the highest daily count is ${max}. Every figure is in the table below the chart.`),
    ticks.map((v) => [
      h('svg:line', { class: v === 0 ? 'baseline' : 'grid', x1: pad.l, x2: W - pad.r, y1: y(v), y2: y(v) }),
      h('svg:text', { class: 'axis', x: pad.l - 8, y: y(v) + 4, 'text-anchor': 'end' }, fmtNumber(v)),
    ]),
    labelDays.map((i) => h('svg:text', {
      class: 'axis', x: pad.l + slot * i + slot / 2, y: H - 6,
      'text-anchor': i === 0 ? 'start' : i === daily.length - 1 ? 'end' : 'middle',
    }, fmtDay(daily[i].day))),
    daily.map((d, i) => h('svg:g', {},
      BARS.map((s, k) => (d[s.type] > 0
        ? h('svg:rect', {
          class: `bar s${k}`, x: (pad.l + slot * i + gap / 2 + barW * k).toFixed(1), y: y(d[s.type]).toFixed(1),
          width: Math.max(1, barW - 0.5).toFixed(1), height: Math.max(1, y(0) - y(d[s.type])).toFixed(1), rx: 1,
        }, h('svg:title', {}, `${fmtDay(d.day)}: ${fmtNumber(d[s.type])} ${s.name.toLowerCase()}`))
        : null)),
    )),
  )
  const legend = h('ul', { class: 'legend', 'aria-hidden': 'true' }, BARS.map((s, k) => h('li', {}, h('span', { class: `swatch s${k}` }), s.name)))
  const rows = daily.filter((d) => SERIES.some((s) => d[s.type] > 0))
  const tableEl = h('details', { class: 'chart-table' },
    h('summary', {}, 'Show the figures as a table'),
    h('div', { class: 'table-wrap' }, h('table', { class: 'table compact' },
      h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Day'), SERIES.map((s) => h('th', { scope: 'col', class: 'num' }, s.name)))),
      h('tbody', {}, rows.map((d) => h('tr', {}, h('th', { scope: 'row' }, fmtDay(d.day)), SERIES.map((s) => h('td', { class: 'num' }, fmtNumber(d[s.type])))))),
    )),
  )
  return h('div', { class: 'chart-wrap' }, legend, svg, tableEl)
}

/** 1, 2 or 5 times a power of ten, at least `n` (and at least 1: counts are whole). */
function niceStep (n) {
  if (n <= 1) return 1
  const p = 10 ** Math.floor(Math.log10(n))
  for (const m of [1, 2, 5, 10]) if (m * p >= n) return m * p
  return 10 * p
}

function totalsCard (s) {
  const types = SENT_EVENT_TYPES
  return h('section', { class: 'card', 'aria-labelledby': 'totals-title' },
    h('div', { class: 'card-head' }, h('h2', { id: 'totals-title' }, 'Events'), h('a', { href: '#/emails', class: 'link-more' }, 'All emails')),
    h('dl', { class: 'totals' }, types.map((t) => [h('dt', {}, badge(t, label(t))), h('dd', {}, fmtNumber(s.totals[t]))])),
  )
}

async function webhooksCard (hooks) {
  const head = h('div', { class: 'card-head' }, h('h2', { id: 'hooks-title' }, 'Webhooks'), h('a', { href: '#/webhooks', class: 'link-more' }, 'Manage'))
  const card = h('section', { class: 'card', 'aria-labelledby': 'hooks-title' }, head)
  if (hooks.length === 0) {
    card.append(empty('No webhooks yet', 'Add one to receive delivery events at your own URL.'))
    return card
  }
  // Failing: an enabled webhook with deliveries that failed for good or are being retried.
  let problems
  try {
    problems = await Promise.all(hooks.map(async (w) => {
      if (w.status !== 'enabled') return { w, why: w.status === 'auto_disabled' ? 'disabled after failing for days' : 'disabled', tone: w.status }
      const [failed, retrying] = await Promise.all([
        api.get(`/api/webhooks/${encodeURIComponent(w.id)}/deliveries?status=failed&limit=1`),
        api.get(`/api/webhooks/${encodeURIComponent(w.id)}/deliveries?status=retrying&limit=1`),
      ])
      if (failed.data.length > 0) return { w, why: 'has failed deliveries', tone: 'failed' }
      if (retrying.data.length > 0) return { w, why: 'deliveries are being retried', tone: 'retrying' }
      return null
    }))
  } catch (err) {
    card.append(errorBox(err))
    return card
  }
  const bad = problems.filter(Boolean)
  const healthy = hooks.length - bad.length
  card.append(h('p', { class: 'muted' }, `${healthy} of ${hooks.length} healthy`))
  if (bad.length === 0) {
    card.append(h('p', { class: 'all-good' }, badge('enabled', 'all good'), ' Every webhook is enabled and delivering.'))
    return card
  }
  card.append(h('ul', { class: 'problem-list' }, bad.map(({ w, why, tone }) => h('li', {},
    badge(tone), ' ',
    h('a', { href: `#/webhooks/${encodeURIComponent(w.id)}`, class: 'mono truncate' }, w.url),
    h('span', { class: 'muted' }, ` ${why}`),
  ))))
  return card
}
