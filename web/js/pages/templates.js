// @ts-check
// Templates: the list and the new-template form; one template: its current version in a form (saving
// makes the next version), its versions (each can be opened, read only), a preview with sample variables
// shown in a sandboxed frame (no script runs there, nothing it holds can reach the dashboard), and delete.
import { api, query } from '../api.js'
import { announce, clear, confirmDialog, empty, errorBox, h, pageHeader, td, time, table } from '../dom.js'
import { field, form } from '../form.js'
import { morePages } from '../pager.js'

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/

function checkName (value) {
  return NAME.test(String(value).trim()) ? '' : 'Letters, digits, ., _ and -, starting with a letter or digit (like password-reset), at most 100'
}

/** The variables box holds JSON: an array of { name, default? }. '' when it parses to one. */
function checkVariables (value) {
  if (String(value).trim() === '') return ''
  try {
    const v = JSON.parse(value)
    if (!Array.isArray(v) || v.some((x) => typeof x !== 'object' || x === null || typeof x.name !== 'string')) return 'An array of { "name": …, "default": … } (the default is optional)'
    return ''
  } catch {
    return 'Not JSON: an array like [{ "name": "footer", "default": "Thanks!" }]'
  }
}

function checkSample (value) {
  if (String(value).trim() === '') return ''
  try {
    const v = JSON.parse(value)
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? '' : 'A JSON object of name → value'
  } catch {
    return 'Not JSON: an object like { "name": "Jane" }'
  }
}

const area = (name, rows, value = '') => h('textarea', { name, rows, class: 'mono', spellcheck: 'false', value })

/** The content fields (subject, html, text, variables), filled from a version when one is given. */
function contentFields (t) {
  return [
    field({ name: 'subject', label: 'Subject', value: t?.subject ?? '', maxlength: 998, hint: 'Liquid: Hello {{ name }}. No line breaks.', validate: (v) => (v.trim() ? '' : 'A subject is required') }),
    field({ name: 'html', label: 'HTML', control: area('html', 10, t?.html ?? ''), hint: 'Every {{ output }} is HTML-escaped; {{ x | raw }} prints as is. HTML or text is required.' }),
    field({ name: 'text', label: 'Text', control: area('text', 5, t?.text ?? ''), hint: 'Printed as given.' }),
    field({
      name: 'variables', label: 'Declared variables (JSON)', control: area('variables', 3, t && t.variables.length > 0 ? JSON.stringify(t.variables) : ''),
      hint: 'Optional: [{ "name": "footer", "default": "Thanks!" }]. A variable with a default may be left out of a send.', validate: checkVariables,
    }),
  ]
}

/** The API body of the content fields; `removeEmpty`: an emptied html or text is removed (null). */
function contentBody (values, removeEmpty) {
  const part = (v) => (v.trim() === '' ? (removeEmpty ? null : undefined) : v)
  return {
    subject: values.subject,
    html: part(values.html),
    text: part(values.text),
    variables: values.variables.trim() === '' ? [] : JSON.parse(values.variables),
  }
}

export async function list (view, ctx) {
  const listArea = h('section', { class: 'card flush', 'aria-labelledby': 'templates-title' })
  const create = form({
    fields: [field({ name: 'name', label: 'Name', autocomplete: 'off', spellcheck: 'false', maxlength: 100, validate: checkName }), ...contentFields(null)],
    submitLabel: 'Save template',
    busyLabel: 'Saving…',
    submit: async (values) => {
      const res = await api.post('/api/templates', { name: values.name.trim(), ...contentBody(values, false) })
      announce(res.message)
      ctx.router.go(`/templates/${encodeURIComponent(res.data.id)}`)
    },
  })

  async function refresh () {
    let templates
    try {
      templates = await api.get('/api/templates')
    } catch (err) {
      clear(listArea).append(errorBox(err))
      return
    }
    clear(listArea).append(h('div', { class: 'card-head' }, h('h2', { id: 'templates-title', tabindex: '-1' }, 'Your templates')))
    if (templates.data.length === 0) {
      listArea.append(empty('No templates yet', 'Save one below; a send then names it with template: { name, variables } in place of subject, html and text.'))
      return
    }
    listArea.append(table({
      caption: 'Templates, newest first',
      columns: ['Name', 'Version', 'Subject', 'Changed'],
      rows: templates.data.map((t) => h('tr', { dataset: { template: t.id } },
        td('Name', h('a', { href: `#/templates/${encodeURIComponent(t.id)}`, class: 'mono' }, t.name)),
        td('Version', String(t.version)),
        td('Subject', h('span', { class: 'truncate' }, t.subject)),
        td('Changed', time(t.updatedAt)),
      )),
    }))
  }

  view.append(
    pageHeader('Templates', h('p', { class: 'muted page-sub' }, 'Stored subjects and bodies (Liquid) that sends name with their own variables. Every change is a new version.')),
    listArea,
    h('section', { class: 'card', 'aria-labelledby': 'new-template' }, h('h2', { id: 'new-template' }, 'New template'), create.el),
  )
  await refresh()
}

export async function detail (view, ctx) {
  const base = `/api/templates/${encodeURIComponent(ctx.params.id)}`
  const version = ctx.query.version ? Number(ctx.query.version) : undefined
  const t = (await api.get(version ? `${base}/versions/${version}` : base)).data
  const current = (await api.get(base)).data
  const old = t.version !== current.version

  const edit = form({
    fields: [field({ name: 'name', label: 'Name', value: current.name, autocomplete: 'off', spellcheck: 'false', maxlength: 100, validate: checkName }), ...contentFields(t)],
    submitLabel: old ? `Save as version ${current.version + 1}` : 'Save as a new version',
    busyLabel: 'Saving…',
    submit: async (values) => {
      const body = contentBody(values, true)
      const res = await api.patch(base, { ...(values.name.trim() !== current.name ? { name: values.name.trim() } : {}), ...body })
      announce(res.message)
      ctx.router.go(`/templates/${encodeURIComponent(res.data.id)}`)
    },
  })

  // The preview: sample variables in, the rendered parts out; the html in a frame that runs nothing.
  const output = h('div', { class: 'preview', role: 'status', 'aria-live': 'polite' })
  const sample = field({ name: 'variables', label: 'Sample variables (JSON)', control: area('variables', 4, '{}'), validate: checkSample })
  const preview = form({
    fields: [sample],
    submitLabel: 'Preview',
    busyLabel: 'Rendering…',
    submit: async (values) => {
      const variables = values.variables.trim() === '' ? {} : JSON.parse(values.variables)
      const res = await api.post(`${base}/preview`, { variables, version: t.version })
      clear(output).append(
        h('p', {}, h('strong', {}, 'Subject: '), res.data.subject),
        res.data.html !== null
          ? h('iframe', { class: 'message-frame', sandbox: '', srcdoc: res.data.html, title: `The html of version ${res.data.version}, rendered`, referrerpolicy: 'no-referrer' })
          : null,
        res.data.text !== null ? h('pre', { class: 'message-text' }, res.data.text) : null,
      )
    },
  })

  const versionsArea = h('section', { class: 'card flush', 'aria-labelledby': 'versions-title' })
  async function renderVersions () {
    const page = await api.get(`${base}/versions${query({ limit: 20 })}`)
    const rowOf = (v) => h('tr', { dataset: { version: String(v.version) } },
      td('Version', v.version === t.version ? h('strong', {}, `${v.version} (shown)`) : h('a', { href: `#/templates/${encodeURIComponent(current.id)}?version=${v.version}` }, String(v.version))),
      td('Subject', h('span', { class: 'truncate' }, v.subject)),
      td('Made', time(v.createdAt)))
    const body = h('tbody', {}, page.data.map(rowOf))
    clear(versionsArea).append(
      h('div', { class: 'card-head' }, h('h2', { id: 'versions-title', tabindex: '-1' }, 'Versions')),
      table({ caption: 'Versions, newest first', columns: ['Version', 'Subject', 'Made'], body }),
    )
    morePages({
      results: versionsArea, first: page, noun: 'version', plural: 'versions',
      load: (cursor) => api.get(`${base}/versions${query({ limit: 20, cursor })}`),
      addRows: (rows) => body.append(...rows.map(rowOf)),
    })
  }

  const remove = h('button', { type: 'button', class: 'button danger-outline' }, 'Delete')
  remove.addEventListener('click', async () => {
    if (!await confirmDialog({
      title: `Delete ${current.name}?`,
      body: `All ${current.version} version${current.version === 1 ? '' : 's'} go with it, and sends that name it are refused from now on. Emails already sent keep what they were. This cannot be undone.`,
      confirmLabel: 'Delete template',
    })) return
    try {
      await api.del(base)
      announce(`${current.name} deleted`)
      ctx.router.go('/templates')
    } catch (err) { announce(err.message, 'danger') }
  })

  view.append(
    h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: '#/templates' }, 'Templates'), ' / ', h('span', { class: 'mono' }, current.name)),
    pageHeader(current.name, h('p', { class: 'muted page-sub' },
      old ? `Version ${t.version} of ${current.version}, made ` : `Version ${t.version}, made `, time(t.updatedAt),
      '. Sends name it as ', h('code', {}, `{ "template": { "name": "${current.name}", "variables": { … } } }`), '.'),
    h('div', { class: 'actions' }, remove)),
    old ? h('p', { class: 'alert tone-warn' }, `You are reading version ${t.version}. Saving makes version ${current.version + 1} from what the form holds.`) : null,
    h('section', { class: 'card', 'aria-labelledby': 'edit-title' }, h('h2', { id: 'edit-title' }, 'Edit'), edit.el),
    h('section', { class: 'card', 'aria-labelledby': 'preview-title' }, h('h2', { id: 'preview-title' }, 'Preview'),
      h('p', { class: 'muted small' }, 'Renders this version with the variables given; nothing is sent. The frame runs no script.'), preview.el, output),
    versionsArea,
  )
  await renderVersions()
}
