// `node dist/benchmarks/template-render.js` (after `npm run build`): what a template costs a send, two
// ways. First the render alone (src/mail/render-template.ts, compiled once, as every send after a version's
// first finds it): microseconds of the main thread per send for three templates, beside what compiling a
// version costs once and what svc's per-recipient copy costs (mail-render's path: src/mail/mime.ts, no
// DKIM), which a plain send pays too. Then a batch of 100 sends through the real API (in process,
// SVC_ROLES=api, SQLite in a temporary directory, the store's writes included): 100 template sends against
// 100 plain sends of the same content, the main thread's busy time and the wall time per batch.
// Medians of 15 after 3 warm-ups.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { loadConfig } from '../config/index.js'
import type { TemplateContent } from '../src/domain/templates.js'
import { mimeTemplate } from '../src/mail/mime.js'
import { compileTemplate, renderBudget, renderTemplate, type CompiledTemplate } from '../src/mail/render-template.js'
import { createService } from '../src/service.js'
import { openSqliteStore } from '../src/store/sqlite/index.js'

const RUNS = 15
const WARM = 3
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]!

const items = Array.from({ length: 5 }, (_, i) => ({ title: `Item ${i} <with markup>`, price: (i + 1) * 3.5 }))
const TEMPLATES: Array<{ name: string; content: TemplateContent; variables: Record<string, unknown> }> = [
  {
    name: 'welcome (3 outputs)',
    content: { subject: 'Welcome, {{ name }}', html: '<p>Hello {{ name }}, welcome to {{ product }}.</p>', text: 'Hello {{ name }}', variables: [] },
    variables: { name: 'Jane <Doe>', product: 'Shop' },
  },
  {
    name: 'receipt (a loop of 5, 20 tags)',
    content: {
      subject: 'Receipt for order {{ order }}',
      html: '<h1>Thanks, {{ name }}</h1><table>{% for item in items %}<tr><td>{{ item.title }}</td><td>{{ item.price | times: 1.2 | round: 2 }}</td></tr>{% endfor %}</table>' +
        '<p>Total: {{ total }}{% if coupon %} (coupon {{ coupon }}){% endif %}</p><p>{{ footer }}</p>',
      text: 'Order {{ order }} for {{ name }}: {% for item in items %}{{ item.title }} {{ item.price }}; {% endfor %}total {{ total }}',
      variables: [{ name: 'footer', default: 'Shop Inc.' }, { name: 'coupon', default: null }],
    },
    variables: { name: 'Jane', order: 1234, items, total: 52.5 },
  },
  {
    name: 'newsletter (30 KiB, 200 outputs)',
    content: {
      subject: '{{ title }}',
      html: Array.from({ length: 200 }, (_, i) => `<p>Paragraph ${i} for {{ name }}: a line of html with <a href="https://example.com/p/${i}">a link</a> and some words.</p>\n`).join(''),
      text: null,
      variables: [],
    },
    variables: { name: 'Jane', title: 'The monthly letter' },
  },
]

function compile (content: TemplateContent): CompiledTemplate {
  const r = compileTemplate(content)
  if ('errors' in r) throw new Error(JSON.stringify(r.errors))
  return r.compiled
}

console.log('| template | compile, once per version | render per send (µs, main thread) | svc\'s copy per recipient, plain path (µs) |')
console.log('|---|---|---|---|')
for (const t of TEMPLATES) {
  const compiles: number[] = []
  for (let i = 0; i < RUNS + WARM; i++) {
    const t0 = performance.now()
    compile(t.content)
    if (i >= WARM) compiles.push(performance.now() - t0)
  }
  const c = compile(t.content)
  const renders: number[] = []
  let out = renderTemplate(c, t.variables, renderBudget())
  for (let i = 0; i < RUNS + WARM; i++) {
    const n = 200
    const t0 = performance.now()
    for (let j = 0; j < n; j++) out = renderTemplate(c, t.variables, renderBudget())
    if (i >= WARM) renders.push(((performance.now() - t0) * 1000) / n)
  }
  if ('refused' in out) throw new Error(JSON.stringify(out.refused))
  // The plain path's per-recipient cost on the same content: the message template once, then copies.
  const copies: number[] = []
  const template = await mimeTemplate({ messageId: 'em_bench', from: 'Shop <shop@example.com>', to: ['a@example.net'], cc: [], bcc: [], subject: out.subject, html: out.html ?? undefined, text: out.text ?? undefined, headers: {} })
  for (let i = 0; i < RUNS + WARM; i++) {
    const n = 50
    const t0 = performance.now()
    for (let j = 0; j < n; j++) await template.render({ html: out.html ?? undefined, headers: { 'List-Unsubscribe': '<https://svc.example.com/t/u/x>' } })
    if (i >= WARM) copies.push(((performance.now() - t0) * 1000) / n)
  }
  console.log(`| ${t.name} | ${median(compiles).toFixed(2)} ms | ${median(renders).toFixed(1)} | ${median(copies).toFixed(1)} |`)
}

// A batch of 100 through the API.
const dir = mkdtempSync(join(tmpdir(), 'svc-template-bench-'))
const store = openSqliteStore({ dataDir: dir })
const config = loadConfig({ SVC_SECRET: 'bench-secret-0123456789-abcdefghijklmnop', LOG_LEVEL: 'silent', DATA_DIR: dir, SVC_ROLES: 'api', RATE_LIMIT_API_PER_SECOND: '100000' })
const service = await createService(config, { store })
await service.start()
const app = service.app
try {
  const signup = await app.inject({ method: 'POST', url: '/api/auth/signup', payload: { email: 'bench@example.test', password: 'correct horse battery' } })
  const cookie = String(signup.headers['set-cookie']).split(';')[0]!
  const origin = config.publicUrl
  const key = (JSON.parse((await app.inject({ method: 'POST', url: '/api/keys', headers: { cookie, origin }, payload: { name: 'bench' } })).body) as { data: { key: string } }).data.key
  const receipt = TEMPLATES[1]!
  await app.inject({ method: 'POST', url: '/api/templates', headers: { cookie, origin }, payload: { name: 'receipt', ...receipt.content, html: receipt.content.html!, text: receipt.content.text! } })
  const rendered = renderTemplate(compile(receipt.content), receipt.variables, renderBudget())
  if ('refused' in rendered) throw new Error('refused')
  const plain = Array.from({ length: 100 }, (_, n) => ({ to: `reader${n}@example.net`, subject: rendered.subject, html: rendered.html!, text: rendered.text! }))
  const templated = Array.from({ length: 100 }, (_, n) => ({ to: `reader${n}@example.net`, template: { name: 'receipt', variables: { ...receipt.variables, order: n } } }))
  const batch = async (payload: unknown): Promise<{ active: number; wall: number }> => {
    const elu = performance.eventLoopUtilization()
    const t0 = performance.now()
    const res = await app.inject({ method: 'POST', url: '/api/send/batch', headers: { 'x-api-key': key }, payload: payload as object })
    if (res.statusCode !== 202) throw new Error(`${res.statusCode} ${res.body}`)
    return { active: performance.eventLoopUtilization(elu).active, wall: performance.now() - t0 }
  }
  const a: Array<{ active: number; wall: number }> = []
  const b: Array<{ active: number; wall: number }> = []
  for (let i = 0; i < RUNS + WARM; i++) {
    const x = await batch(plain)
    const y = await batch(templated)
    if (i >= WARM) { a.push(x); b.push(y) }
  }
  const fmt = (xs: Array<{ active: number; wall: number }>) => `${median(xs.map((v) => v.active)).toFixed(1)} ms / ${median(xs.map((v) => v.wall)).toFixed(1)} ms`
  console.log('')
  console.log('| POST /api/send/batch of 100 (receipt) | main thread / wall per batch |')
  console.log('|---|---|')
  console.log(`| 100 plain sends (the same content, rendered beforehand) | ${fmt(a)} |`)
  console.log(`| 100 template sends, each with its own variables | ${fmt(b)} |`)
} finally {
  await service.stop()
  await store.close()
  rmSync(dir, { recursive: true, force: true })
}
