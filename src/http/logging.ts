// What a request log line says about the path. Paths carry credentials and personal data: tracking
// tokens (/t/c/<token>, whose claims hold a recipient's address and a link) and suppressed addresses
// (/api/suppressions/<email>). A line names the route pattern, with only id-shaped parameters filled in;
// an unrouted path is cut to its first segments.
import type { FastifyRequest } from 'fastify'

// Ids svc makes: <type>_ + 28 hex digits (src/domain/ids.ts). Nothing else is written into a log line.
const ID = /^[a-z]{1,8}_[0-9a-f]{28}$/
const PARAM = /:([A-Za-z0-9_]+)/g
const MAX_SEGMENT = 32

export function loggedPath (request: FastifyRequest): string {
  const pattern = request.routeOptions?.url
  if (typeof pattern === 'string' && pattern !== '') {
    const params = (request.params ?? {}) as Record<string, unknown>
    return pattern.replace(PARAM, (whole, name: string) => {
      const value = params[name]
      return typeof value === 'string' && value.length <= 64 && ID.test(value) ? value : whole
    })
  }
  return unroutedPath(request.url)
}

/** The first two segments of a path that matched no route (one under /t/), each cut short; none with an @. */
export function unroutedPath (url: string): string {
  const end = url.search(/[?#]/)
  const segments = (end < 0 ? url : url.slice(0, end)).split('/', 4).slice(1)
  const keep = segments[0] === 't' ? 1 : 2
  const shown = segments.slice(0, keep).map((s) => (s.includes('@') || s.toLowerCase().includes('%40') ? '…' : s.length > MAX_SEGMENT ? `${s.slice(0, MAX_SEGMENT)}…` : s))
  return `/${shown.join('/')}${segments.length > keep ? '/…' : ''}`
}
