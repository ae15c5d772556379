// @ts-check
// Hash routes (#/emails/em_…?status=bounced): the server serves one page, and a reload or a shared link
// lands on the same view. Each route names a page module's render function.

/** Compiles '/emails/:id' into a matcher. */
function compile (pattern) {
  const names = []
  const source = pattern.split('/').map((part) => {
    if (part.startsWith(':')) { names.push(part.slice(1)); return '([^/]+)' }
    return part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
  }).join('/')
  const re = new RegExp(`^${source}$`)
  return (path) => {
    const m = re.exec(path)
    if (!m) return null
    return Object.fromEntries(names.map((n, i) => [n, decodeURIComponent(m[i + 1])]))
  }
}

export function createRouter (routes, onRoute) {
  const table = routes.map((r) => ({ ...r, match: compile(r.path) }))

  function current () {
    const raw = location.hash.replace(/^#/, '') || '/'
    const [path, search = ''] = raw.split('?')
    return { path: path || '/', query: Object.fromEntries(new URLSearchParams(search)) }
  }

  function resolve () {
    const { path, query } = current()
    for (const r of table) {
      const params = r.match(path)
      if (params) return onRoute({ route: r, params, query, path })
    }
    return onRoute({ route: null, params: {}, query, path })
  }

  window.addEventListener('hashchange', resolve)
  return {
    resolve,
    /** Goes to `path` (with an optional query object); `replace` keeps the history entry. */
    go (path, queryObj, { replace = false } = {}) {
      const q = queryObj ? new URLSearchParams(Object.entries(queryObj).filter(([, v]) => v !== '' && v != null)).toString() : ''
      const hash = `#${path}${q ? `?${q}` : ''}`
      if (location.hash === hash) return resolve()
      if (replace) {
        history.replaceState(null, '', hash)
        return resolve()
      }
      location.hash = hash
    },
    current,
  }
}
