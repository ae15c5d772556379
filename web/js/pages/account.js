// @ts-check
// The account: who, which plan, its limits and what is used of them.
import { api } from '../api.js'
import { h, pageHeader, time } from '../dom.js'

export async function render (view) {
  const a = (await api.get('/api/account')).data
  const meter = (name, used, limit) => {
    const id = `use-${name.replace(/\s/g, '-')}`
    return h('div', { class: 'usage' },
      h('div', { class: 'usage-line' }, h('span', { id }, name), h('span', {}, `${used} of ${limit}`)),
      h('meter', { min: 0, max: limit, value: used, high: Math.max(limit - 1, 0.5), optimum: 0, 'aria-labelledby': id }, `${used} of ${limit}`),
    )
  }
  view.append(
    pageHeader('Account'),
    h('div', { class: 'grid-2' },
      h('section', { class: 'card', 'aria-labelledby': 'acct-title' },
        h('h2', { id: 'acct-title' }, 'You'),
        h('dl', { class: 'fields' },
          h('dt', {}, 'Email'), h('dd', {}, a.email),
          h('dt', {}, 'Account ID'), h('dd', { class: 'mono' }, a.id),
          h('dt', {}, 'Member since'), h('dd', {}, time(a.createdAt)),
          h('dt', {}, 'Plan'), h('dd', {}, h('span', { class: 'badge tone-info' }, a.plan)),
          h('dt', {}, 'Sending'), h('dd', {}, a.transport === 'sandbox' ? 'Sandbox: nothing leaves this machine (SMTP_URL is not set)' : 'Through the SMTP relay (SMTP_URL)'),
        ),
        h('p', { class: 'muted small' }, 'An operator changes the plan with the svc CLI.'),
      ),
      h('section', { class: 'card', 'aria-labelledby': 'use-title' },
        h('h2', { id: 'use-title' }, 'Limits and usage'),
        meter('Active API keys', a.usage.apiKeys, a.limits.apiKeys),
        meter('Webhooks', a.usage.webhooks, a.limits.webhooks),
        meter('Sender domains', a.usage.domains, a.limits.domains),
        // Sending quotas (recipients accepted per UTC day and month); a period without a limit shows its count.
        ...[['Recipients today', a.sending.day], ['Recipients this month', a.sending.month]].map(([name, p]) =>
          p.limit === null
            ? h('div', { class: 'usage' }, h('div', { class: 'usage-line' }, h('span', {}, name), h('span', {}, `${p.used}`)))
            : meter(name, p.used, p.limit)),
        h('p', { class: 'muted small' }, 'Revoked keys and deleted webhooks do not count. Quotas start again at midnight UTC and on the first of the month.'),
      ),
    ),
  )
}
