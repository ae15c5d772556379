// @ts-check
// API keys: create (the key shown once, with a copy button and a warning), list, revoke after a confirmation.
import { api } from '../api.js'
import { announce, badge, clear, confirmDialog, empty, errorBox, h, pageHeader, secretPanel, td, time, table } from '../dom.js'
import { field, form, rules } from '../form.js'

export async function render (view) {
  const listArea = h('section', { class: 'card flush', 'aria-labelledby': 'keys-title' })
  const secretArea = h('div', {})
  const usage = h('p', { class: 'muted page-sub' })

  const name = field({
    name: 'name', label: 'Name', hint: 'What uses it, like "production" or "billing job". 1 to 50 characters.',
    maxlength: 50, autocomplete: 'off', validate: rules.length(1, 50, 'a name'),
  })
  const permissionSelect = h('select', { name: 'permission' },
    h('option', { value: 'full_access' }, 'Full access'),
    h('option', { value: 'sending_access' }, 'Sending only'))
  const permission = field({
    name: 'permission', label: 'Permission', control: permissionSelect,
    hint: 'Full access: everything this dashboard does. Sending only: send and read emails, nothing else.',
  })
  const create = form({
    fields: [name, permission],
    submitLabel: 'Create key',
    busyLabel: 'Creating…',
    className: 'inline',
    submit: async (values) => {
      const res = await api.post('/api/keys', { name: values.name.trim(), permission: values.permission })
      create.reset()
      showSecret(res.data)
      await refresh()
    },
  })

  function showSecret (k) {
    clear(secretArea).append(secretPanel({
      title: `Your new key "${k.name}"`,
      value: k.key,
      what: 'API key',
      warning: 'Copy it now and keep it somewhere safe: svc stores only a hash, so it will not be shown again.',
      onDone: () => name.input.focus(),
    }))
    secretArea.querySelector('h2').focus()
    announce('API key created. Copy it now: it will not be shown again.')
  }

  async function revoke (k) {
    const ok = await confirmDialog({
      title: `Revoke "${k.name}"?`,
      body: `Requests with ${k.keyPrefix}… are refused from now on, on every node. This cannot be undone.`,
      confirmLabel: 'Revoke key',
    })
    if (!ok) return
    try {
      await api.del(`/api/keys/${encodeURIComponent(k.id)}`)
      announce(`Key "${k.name}" revoked`)
      await refresh()
      listArea.querySelector('h2')?.focus()
    } catch (err) {
      announce(err.message, 'danger')
    }
  }

  async function refresh () {
    let keys, account
    try {
      [keys, account] = await Promise.all([api.get('/api/keys'), api.get('/api/account')])
    } catch (err) {
      clear(listArea).append(errorBox(err))
      return
    }
    const { usage: u, limits } = account.data
    usage.textContent = `${u.apiKeys} of ${limits.apiKeys} active keys on the ${account.data.plan} plan.`
    clear(listArea).append(h('div', { class: 'card-head' }, h('h2', { id: 'keys-title', tabindex: '-1' }, 'Your keys')))
    if (keys.data.length === 0) {
      listArea.append(empty('No API keys yet', 'Create one above to send email with POST /api/send.'))
      return
    }
    listArea.append(table({ caption: 'API keys, newest first', columns: ['Name', 'Key', 'Permission', 'Created', 'Last used', 'Status', h('span', { class: 'visually-hidden' }, 'Actions')], body: h('tbody', {}, keys.data.map((k) => h('tr', { dataset: { key: k.id } },
        td('Name', h('strong', {}, k.name)),
        td('Key', h('code', {}, `${k.keyPrefix}…`)),
        td('Permission', k.permission === 'sending_access' ? 'Sending only' : 'Full access'),
        td('Created', time(k.createdAt)),
        td('Last used', k.lastUsedAt ? time(k.lastUsedAt) : h('span', { class: 'muted' }, 'never')),
        td('Status', badge(k.status)),
        td('Actions', k.status === 'active'
          ? h('button', { type: 'button', class: 'button small danger-outline', 'aria-label': `Revoke ${k.name}`, onclick: () => revoke(k) }, 'Revoke')
          : h('span', { class: 'muted small' }, 'revoked ', time(k.revokedAt))),
      ))) }))
  }

  view.append(
    pageHeader('API keys', usage),
    secretArea,
    h('section', { class: 'card', 'aria-labelledby': 'new-key' }, h('h2', { id: 'new-key' }, 'Create a key'), create.el),
    listArea,
  )
  await refresh()
}
