// @ts-check
// Suppressions: addresses later sends skip. Look one up, add one, remove one (after a confirmation),
// and page through the list.
import { ApiError, api, query } from '../api.js'
import { announce, badge, clear, confirmDialog, empty, errorBox, h, pageHeader, td, time, table } from '../dom.js'
import { field, form, rules } from '../form.js'
import { morePages } from '../pager.js'

const REASONS = ['manual', 'bounced', 'complained', 'unsubscribed']
const PAGE = 50

export async function render (view) {
  const listArea = h('section', { class: 'card flush', 'aria-labelledby': 'supp-title' })
  const found = h('div', { class: 'lookup-result', role: 'status', 'aria-live': 'polite' })

  const searchAddress = field({ name: 'email', label: 'Address', type: 'email', placeholder: 'name@example.com', autocomplete: 'off', validate: rules.email })
  const search = form({
    fields: [searchAddress],
    submitLabel: 'Look up',
    busyLabel: 'Looking…',
    className: 'inline',
    submit: async (values) => {
      const address = values.email.trim().toLowerCase()
      clear(found)
      try {
        const res = await api.get(`/api/suppressions/${encodeURIComponent(address)}`)
        found.append(h('div', { class: 'card lookup' }, entryLine(res.data)))
      } catch (err) {
        if (!(err instanceof ApiError) || err.status !== 404) throw err
        found.append(h('p', { class: 'muted' }, h('strong', {}, address), ' is not suppressed: sends reach it.'))
      }
    },
  })

  const address = field({ name: 'email', label: 'Address', type: 'email', placeholder: 'name@example.com', autocomplete: 'off', validate: rules.email })
  const reasonSelect = h('select', { name: 'reason' }, REASONS.map((r) => h('option', { value: r }, r)))
  const reason = field({ name: 'reason', label: 'Reason', control: reasonSelect })
  const add = form({
    fields: [address, reason],
    submitLabel: 'Suppress address',
    busyLabel: 'Adding…',
    className: 'inline',
    submit: async (values) => {
      const res = await api.post('/api/suppressions', { email: values.email.trim(), reason: values.reason })
      add.reset()
      announce(res.message)
      await refresh()
    },
  })

  function entryLine (s) {
    return h('div', { class: 'entry' },
      h('strong', { class: 'mono' }, s.email), ' ', badge(s.reason), ' ', h('span', { class: 'muted small' }, 'since ', time(s.createdAt)), ' ',
      removeButton(s))
  }

  function removeButton (s) {
    return h('button', {
      type: 'button', class: 'button small danger-outline', 'aria-label': `Remove ${s.email}`,
      onclick: async () => {
        const ok = await confirmDialog({
          title: `Remove ${s.email} from the list?`,
          body: `Later sends will reach ${s.email} again${s.reason === 'manual' ? '' : `, although it was suppressed because it ${s.reason === 'unsubscribed' ? 'unsubscribed' : s.reason}`}.`,
          confirmLabel: 'Remove',
        })
        if (!ok) return
        try {
          await api.del(`/api/suppressions/${encodeURIComponent(s.email)}`)
          announce(`${s.email} removed from the suppression list`)
          clear(found)
          await refresh()
          listArea.querySelector('h2')?.focus()
        } catch (err) { announce(err.message, 'danger') }
      },
    }, 'Remove')
  }

  async function refresh () {
    let page
    try {
      page = await api.get(`/api/suppressions${query({ limit: PAGE })}`)
    } catch (err) {
      clear(listArea).append(errorBox(err))
      return
    }
    clear(listArea).append(h('div', { class: 'card-head' }, h('h2', { id: 'supp-title', tabindex: '-1' }, 'Suppressed addresses')))
    if (page.data.length === 0) {
      listArea.append(empty('No suppressed addresses', 'Bounces, complaints and unsubscribes land here on their own.'))
      return
    }
    const rowOf = (s) => h('tr', { dataset: { email: s.email } },
      td('Address', h('span', { class: 'mono' }, s.email)),
      td('Reason', badge(s.reason)),
      td('Since', time(s.createdAt)),
      td('Actions', removeButton(s)))
    const body = h('tbody', {}, page.data.map(rowOf))
    listArea.append(table({ caption: 'Suppressed addresses, newest first', columns: ['Address', 'Reason', 'Since', h('span', { class: 'visually-hidden' }, 'Actions')], body: body }))
    morePages({
      results: listArea, first: page, noun: 'address', plural: 'addresses',
      load: (cursor) => api.get(`/api/suppressions${query({ limit: PAGE, cursor })}`),
      addRows: (rows) => body.append(...rows.map(rowOf)),
    })
  }

  view.append(
    pageHeader('Suppressions', h('p', { class: 'muted page-sub' }, 'Sends skip these addresses. Bounces, complaints and unsubscribes add to the list on their own.')),
    h('div', { class: 'grid-2' },
      h('section', { class: 'card', 'aria-labelledby': 'search-title' }, h('h2', { id: 'search-title' }, 'Look up an address'), search.el, found),
      h('section', { class: 'card', 'aria-labelledby': 'add-title' }, h('h2', { id: 'add-title' }, 'Add an address'), add.el),
    ),
    listArea,
  )
  await refresh()
}
