// The dashboard: the static files of web/ (plain ES modules and one stylesheet, no build step), served at
// `/` by svc itself. The browser code talks to the public JSON API only, with the session cookie.
//
// The files are read once, when the app is built: each becomes its own GET route, so nothing a request
// names ever reaches the file system, and a path that is not a file is the API's ordinary 404. Every answer
// carries a strict Content-Security-Policy (no inline script or style, nothing from another origin) and
// an ETag; `no-cache` makes the browser revalidate, so a new release is seen at once and an unchanged
// file costs a 304.
import { createHash } from 'node:crypto'
import { readFileSync, readdirSync } from 'node:fs'
import { extname, join, relative, sep } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { FastifyInstance, FastifyReply } from 'fastify'

/** Where web/ is: from dist/src/http/ (compiled) up to the repository root. */
export const WEB_ROOT = fileURLToPath(new URL('../../../web/', import.meta.url))

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
}

export const CONTENT_SECURITY_POLICY = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "font-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ')

const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy': CONTENT_SECURITY_POLICY,
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
  'permissions-policy': 'camera=(), microphone=(), geolocation=(), payment=()',
}

export interface WebFile {
  /** The URL path: `/app.css`, `/js/app.js`; index.html is also `/`. */
  path: string
  type: string
  body: Buffer
  etag: string
}

/** Every servable file under `root` (by extension; anything else is left out), read now. */
export function loadWebFiles (root: string): WebFile[] {
  const files: WebFile[] = []
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (entry.name.startsWith('.')) continue
      const full = join(dir, entry.name)
      if (entry.isDirectory()) { walk(full); continue }
      const type = TYPES[extname(entry.name)]
      if (!entry.isFile() || type === undefined) continue
      const body = readFileSync(full)
      const etag = `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`
      files.push({ path: '/' + relative(root, full).split(sep).join('/'), type, body, etag })
    }
  }
  walk(root)
  return files.sort((a, b) => (a.path < b.path ? -1 : 1))
}

function serve (file: WebFile, ifNoneMatch: string | undefined, reply: FastifyReply): FastifyReply {
  reply.headers(SECURITY_HEADERS)
  reply.header('cache-control', 'no-cache')
  reply.header('etag', file.etag)
  if (ifNoneMatch !== undefined && ifNoneMatch.split(',').some((t) => t.trim() === file.etag)) return reply.code(304).send()
  return reply.type(file.type).send(file.body)
}

export function registerDashboard (app: FastifyInstance, opts: { root?: string } = {}): void {
  const files = loadWebFiles(opts.root ?? WEB_ROOT)
  for (const file of files) {
    const paths = file.path === '/index.html' ? ['/', '/index.html'] : [file.path]
    for (const url of paths) {
      app.get(url, { schema: { hide: true } }, async (request, reply) => serve(file, request.headers['if-none-match'], reply))
    }
  }
}
