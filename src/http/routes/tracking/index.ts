// The links inside sent emails: the open pixel, tracked clicks and the unsubscribe. No authentication:
// the sealed token (src/mail/tracking.ts) is the credential, and it names one email and one recipient;
// the email service opens it, so no route holds the secret. A token that is forged, altered, expired or
// of the wrong kind is a 404, never a redirect.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyReply } from 'fastify'
import type { TrackingKind } from '../../../app/emails.js'
import type { RouteContext } from '../context.js'
import { ClickRoute, OpenRoute, UnsubscribePageRoute, UnsubscribeRoute } from './schema.js'

// The smallest transparent GIF: 1×1, one transparent colour.
const PIXEL = Buffer.from('R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7', 'base64')
const NO_CACHE = 'no-store, no-cache, must-revalidate, private'
// The page loads nothing and posts only to itself; the token in its URL never leaves in a Referer.
const PAGE_HEADERS = {
  'cache-control': NO_CACHE,
  'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'referrer-policy': 'no-referrer',
  'x-content-type-options': 'nosniff',
}
// One-click unsubscribes (RFC 8058) post `List-Unsubscribe=One-Click` as a form, urlencoded or multipart;
// the token is the whole authority, so a small body of any type is read and dropped.
const FORM_LIMIT = 4096

function escapeHtml (s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&#39;')
}

function page (reply: FastifyReply, status: number, title: string, body: string) {
  return reply.code(status).headers(PAGE_HEADERS).type('text/html; charset=utf-8').send(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex"><title>${escapeHtml(title)}</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem;color:#222}
button{font:inherit;padding:.5rem 1.25rem;cursor:pointer}</style></head>
<body><main><h1>${escapeHtml(title)}</h1>${body}</main></body></html>
`)
}

const notFound = (reply: FastifyReply) =>
  page(reply, 404, 'Link not valid', '<p>This link is not valid or has expired.</p>')

const trackingRoutes: FastifyPluginAsyncTypebox<RouteContext> = async (app, { services }) => {
  const verify = (token: string, kind: TrackingKind) => services.emails.trackingClaims(token, kind)

  // Scoped to this plugin: every other route still takes JSON only.
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', { parseAs: 'string', bodyLimit: FORM_LIMIT }, (_request, _body, done) => done(null, undefined))

  // HEAD (link checkers, proxies probing a URL) gets the same answer but records nothing.
  app.get('/t/o/:token', { schema: OpenRoute }, async (request, reply) => {
    const claims = verify(request.params.token, 'open')
    if (claims === null) return notFound(reply)
    if (request.method !== 'HEAD' && !await services.emails.opened(claims.emailId, claims.recipient)) return notFound(reply)
    return reply.code(200).header('cache-control', NO_CACHE).header('pragma', 'no-cache').header('expires', '0')
      .type('image/gif').send(PIXEL)
  })

  app.get('/t/c/:token', { schema: ClickRoute }, async (request, reply) => {
    const claims = verify(request.params.token, 'click')
    if (claims === null || claims.url === undefined) return notFound(reply)
    if (request.method !== 'HEAD' && !await services.emails.clicked(claims.emailId, claims.recipient, claims.url)) return notFound(reply)
    // The destination is inside the sealed token, so this is never an open redirect.
    return reply.code(302).header('location', claims.url).header('cache-control', NO_CACHE).header('referrer-policy', 'no-referrer').send()
  })

  // A GET never unsubscribes: link scanners and previews fetch every link in an email. The page's button
  // posts, which is also what a mail client's one-click unsubscribe does.
  app.get('/t/u/:token', { schema: UnsubscribePageRoute }, async (request, reply) => {
    const claims = verify(request.params.token, 'unsubscribe')
    if (claims === null) return notFound(reply)
    return page(reply, 200, 'Unsubscribe', `<p>Stop emails from this sender to <strong>${escapeHtml(claims.recipient)}</strong>?</p>
<form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click"><button type="submit">Unsubscribe</button></form>`)
  })

  app.post('/t/u/:token', { schema: UnsubscribeRoute, bodyLimit: FORM_LIMIT }, async (request, reply) => {
    const claims = verify(request.params.token, 'unsubscribe')
    if (claims === null || !await services.emails.unsubscribed(claims.emailId, claims.recipient)) return notFound(reply)
    return page(reply, 200, 'Unsubscribed', `<p><strong>${escapeHtml(claims.recipient)}</strong> will get no more emails from this sender.</p>`)
  })
}

export default trackingRoutes
