// @ts-check
// The JSON API client: same origin, the session cookie rides along, every answer is the API's envelope.
// A failure throws an ApiError carrying the envelope's code, message and details (per field).

export class ApiError extends Error {
  constructor (status, code, message, details) {
    super(message)
    this.name = 'ApiError'
    this.status = status
    this.code = code
    this.details = Array.isArray(details) ? details : []
  }
}

const listeners = new Set()

/** `fn` runs when the session is gone (401 on a cookie route): the app goes back to the login page. */
export function onSessionLost (fn) {
  listeners.add(fn)
  return () => listeners.delete(fn)
}

/** Query string from an object, leaving out empty values. */
export function query (params) {
  const q = new URLSearchParams()
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v))
  const s = q.toString()
  return s ? `?${s}` : ''
}

/**
 * One request. Resolves to the whole envelope ({ data, message, nextCursor? }); rejects with ApiError.
 * `opts.quiet401` keeps a 401 from signalling a lost session (the first probe of the session uses it).
 */
export async function request (method, path, body, opts = {}) {
  /** @type {RequestInit & { headers: Record<string, string> }} */
  const init = { method, credentials: 'same-origin', headers: { accept: 'application/json' } }
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json'
    init.body = JSON.stringify(body)
  }
  let res
  try {
    res = await fetch(path, init)
  } catch {
    throw new ApiError(0, 'network_error', 'The service cannot be reached. Check your connection and try again.')
  }
  let payload
  const text = await res.text()
  try { payload = text ? JSON.parse(text) : null } catch { payload = null }
  if (res.ok && payload && payload.success === true) return payload
  const err = payload && payload.error
    ? new ApiError(res.status, payload.error.code, payload.error.message, payload.error.details)
    : new ApiError(res.status, 'unexpected_response', `The service answered ${res.status}.`)
  if (res.status === 401 && !opts.quiet401 && (err.code === 'invalid_session' || err.code === 'authentication_required')) {
    for (const fn of listeners) fn(err)
  }
  throw err
}

export const api = {
  get: (path, opts) => request('GET', path, undefined, opts),
  post: (path, body = {}) => request('POST', path, body),
  patch: (path, body) => request('PATCH', path, body),
  del: (path) => request('DELETE', path),
}
