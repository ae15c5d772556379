import { Type } from 'typebox'

// The router already caps a path parameter at 8192 characters; the token's own checks do the rest.
export const TokenParams = Type.Object({ token: Type.String({ minLength: 1, maxLength: 8192 }) })

const tags = ['tracking']
// The sealed token in the path is the credential: no cookie, no key.
const security: Array<Record<string, string[]>> = []
const html = (description: string) => ({ description, content: { 'text/html': { schema: { type: 'string' } } } })
// Forged, altered, expired or of the wrong kind: a page a person can read, never a redirect.
const NotValid = html('The link is not valid or has expired (an HTML page)')

export const OpenRoute = {
  operationId: 'trackOpen', tags, security, params: TokenParams,
  summary: 'Tracking pixel: a 1×1 transparent GIF; raises email.opened',
  response: {
    200: { description: 'The pixel (never cached)', content: { 'image/gif': { schema: { type: 'string', format: 'binary' } } } },
    404: NotValid,
  },
}
export const ClickRoute = {
  operationId: 'trackClick', tags, security, params: TokenParams,
  summary: 'Tracked link: 302 to the original URL; raises email.clicked',
  response: {
    302: {
      description: 'To the link\'s original URL (sealed in the token, so never an open redirect)', type: 'null',
      headers: { location: { type: 'string', format: 'uri', description: 'the original URL' } },
    },
    404: NotValid,
    // It never answers 2xx: what else it may answer (a store fault…) is the error envelope.
    default: { $ref: 'ErrorEnvelope#', description: 'Any other answer: the error envelope' },
  },
}
export const UnsubscribePageRoute = {
  operationId: 'showUnsubscribePage', tags, security, params: TokenParams,
  summary: 'Unsubscribe confirmation page (changes nothing; its button posts)',
  response: { 200: html('The confirmation page, naming the address'), 404: NotValid },
}
export const UnsubscribeRoute = {
  operationId: 'unsubscribe', tags, security, params: TokenParams,
  summary: 'Unsubscribe at once (RFC 8058 one-click); raises email.unsubscribed and suppresses the address',
  description: 'Takes any small body (a mail client posts `List-Unsubscribe=One-Click` as a form) and ignores it: the token is the whole authority.',
  response: { 200: html('Done: the address gets no more emails from this sender'), 404: NotValid },
  // Any body type is read (and dropped): never 415.
  omitErrors: [415],
}
