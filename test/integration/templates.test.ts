// Templates on real parts: the app over a real SQLite file and sockets, the sandbox transport to read
// what went out. Saving, versions, sends and batches that name a template, previews, and hostile
// templates that are refused at save or cut off at render while another account keeps sending.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { createSandboxTransport, type SandboxTransport } from '../../src/mail/sandbox-transport.js'
import { TEMPLATE_LIMITS } from '../../src/domain/templates.js'
import { errorOf, startServer } from '../helpers/server.js'
import { sender } from '../helpers/sending.js'

async function setup (t: Parameters<typeof startServer>[0]) {
  const transport = createSandboxTransport({ keep: 300 })
  const server = await startServer(t, { deps: { transport } })
  return { server, transport, s: await sender(server) }
}

function copyOf (transport: SandboxTransport, id: string) {
  const copy = transport.sent().filter((m) => m.messageId === id).at(-1)
  assert.ok(copy, `the transport got ${id}`)
  return copy
}

const receipt = {
  name: 'receipt',
  subject: 'Receipt for order {{ order }}',
  html: '<p>Hello {{ name }},</p><ul>{% for item in items %}<li>{{ item.title }}: {{ item.price }}</li>{% endfor %}</ul><p>{{ footer }}</p>',
  text: 'Hello {{ name }}, order {{ order }}. {{ footer }}',
  variables: [{ name: 'footer', default: 'Thanks!' }, { name: 'items', default: [] }],
}

describe('templates', () => {
  test('saved, listed, changed into versions, read at any version, deleted', async (t) => {
    const { s } = await setup(t)
    const c = s.client
    const created = await c.post('/api/templates', receipt)
    assert.equal(created.status, 201, created.text)
    const tpl = created.body.data
    assert.match(tpl.id, /^tpl_[0-9a-f]{28}$/)
    assert.equal(tpl.version, 1)
    assert.deepEqual(tpl.variables, receipt.variables)

    const twice = await c.post('/api/templates', receipt)
    assert.equal(twice.status, 409)
    assert.equal(errorOf(twice).code, 'template_exists')

    const changed = await c.patch(`/api/templates/${tpl.id}`, { subject: 'Your receipt ({{ order }})' })
    assert.equal(changed.status, 200, changed.text)
    assert.equal(changed.body.data.version, 2)
    assert.equal(changed.body.data.html, receipt.html, 'what the change leaves out is kept')
    const renamed = await c.patch(`/api/templates/${tpl.id}`, { name: 'receipt-v2', html: null })
    assert.equal(renamed.body.data.version, 3, 'every change is a version')
    assert.equal(renamed.body.data.html, null)

    const list = await c.get('/api/templates')
    assert.deepEqual(list.body.data.map((x: any) => [x.name, x.version, x.subject]), [['receipt-v2', 3, 'Your receipt ({{ order }})']])
    assert.equal(list.body.data[0].html, undefined, 'the list leaves the bodies out')

    const page = await c.get(`/api/templates/${tpl.id}/versions?limit=2`)
    assert.deepEqual(page.body.data.map((v: any) => v.version), [3, 2])
    const rest = await c.get(`/api/templates/${tpl.id}/versions?limit=2&cursor=${page.body.nextCursor}`)
    assert.deepEqual(rest.body.data.map((v: any) => v.version), [1])
    assert.equal(rest.body.nextCursor, null)
    const first = await c.get(`/api/templates/${tpl.id}/versions/1`)
    assert.equal(first.body.data.subject, receipt.subject)
    assert.equal(first.body.data.html, receipt.html)
    assert.equal((await c.get(`/api/templates/${tpl.id}/versions/4`)).status, 404)

    const bad = await c.patch(`/api/templates/${tpl.id}`, { text: null })
    assert.equal(bad.status, 422, 'html and text cannot both go')
    assert.equal(errorOf(bad).code, 'template_invalid')

    assert.equal((await c.delete(`/api/templates/${tpl.id}`)).status, 200)
    assert.equal((await c.get(`/api/templates/${tpl.id}`)).status, 404)
    assert.equal((await c.get(`/api/templates/${tpl.id}/versions/1`)).status, 404, 'its versions went with it')
    const sent = await s.send({ to: 'a@example.com', template: { id: tpl.id, variables: { order: 1, name: 'A' } } })
    assert.equal(sent.status, 422)
    assert.equal(errorOf(sent).code, 'template_not_found')
    assert.deepEqual(errorOf(sent).details?.map((d) => d.path), ['body.template.id'])
  })

  test('a send names a template: variables escaped in html, plain in text; the email records its version', async (t) => {
    const { transport, s } = await setup(t)
    const tpl = (await s.client.post('/api/templates', receipt)).body.data
    const name = '<script>alert("x")</script> & Co'
    const res = await s.send({
      to: 'buyer@example.com',
      template: { name: 'receipt', variables: { name, order: 42, items: [{ title: 'Tea <b>', price: 3 }] } },
    })
    assert.equal(res.status, 202, res.text)
    const email = await s.settled(res.body.data.id)
    assert.deepEqual(email.template, { id: tpl.id, version: 1 })
    assert.equal(email.subject, 'Receipt for order 42')
    const copy = copyOf(transport, email.id)
    assert.ok(copy.html?.includes('<p>Hello &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; Co,</p>'), copy.html)
    assert.ok(copy.html?.includes('<li>Tea &lt;b&gt;: 3</li>'))
    assert.ok(!copy.html?.includes('<script>'))
    assert.ok(copy.html?.includes('<p>Thanks!</p>'), 'a declared default fills in')
    assert.equal(copy.text, `Hello ${name}, order 42. Thanks!`, 'text prints the variable as given')

    const plain = await s.send({ to: 'buyer@example.com', subject: 'Hi', text: 'plain' })
    assert.equal((await s.settled(plain.body.data.id)).template, null)
  })

  test('a new version changes new sends only; a send may name an older version', async (t) => {
    const { transport, s } = await setup(t)
    const tpl = (await s.client.post('/api/templates', { name: 'welcome', subject: 'Welcome {{ who }}', text: 'v1 {{ who }}' })).body.data
    const before = await s.send({ to: 'a@example.com', template: { id: tpl.id, variables: { who: 'Ann' } } })
    assert.equal(before.status, 202)
    assert.equal((await s.client.patch(`/api/templates/${tpl.id}`, { text: 'v2 {{ who }}' })).status, 200)
    const after = await s.send({ to: 'a@example.com', template: { id: tpl.id, variables: { who: 'Bob' } } })
    const pinned = await s.send({ to: 'a@example.com', template: { name: 'welcome', version: 1, variables: { who: 'Cid' } } })

    const e1 = await s.settled(before.body.data.id)
    const e2 = await s.settled(after.body.data.id)
    const e3 = await s.settled(pinned.body.data.id)
    assert.deepEqual([e1.template.version, e1.text], [1, 'v1 Ann'], 'the email sent before keeps its version')
    assert.deepEqual([e2.template.version, e2.text], [2, 'v2 Bob'])
    assert.deepEqual([e3.template.version, e3.text], [1, 'v1 Cid'])
    assert.equal(copyOf(transport, e2.id).text, 'v2 Bob')

    const missing = await s.send({ to: 'a@example.com', template: { id: tpl.id, version: 3, variables: { who: 'x' } } })
    assert.equal(missing.status, 422)
    assert.deepEqual(errorOf(missing).details?.map((d) => d.path), ['body.template.version'])
  })

  test('an Idempotency-Key replays the first answer, even once the template is gone', async (t) => {
    const { s } = await setup(t)
    const tpl = (await s.client.post('/api/templates', { name: 'once', subject: 'Hi {{ who }}', text: 'x' })).body.data
    const body = { to: 'a@example.com', template: { id: tpl.id, variables: { who: 'Ann' } } }
    const first = await s.send(body, { 'idempotency-key': 'order-1' })
    assert.equal(first.status, 202)
    assert.equal((await s.client.delete(`/api/templates/${tpl.id}`)).status, 200)
    const again = await s.send(body, { 'idempotency-key': 'order-1' })
    assert.equal(again.status, 202)
    assert.equal(again.headers['idempotent-replayed'], 'true')
    assert.equal(again.body.data.id, first.body.data.id)
    const other = await s.send({ ...body, template: { ...body.template, variables: { who: 'Bob' } } }, { 'idempotency-key': 'order-1' })
    assert.equal(other.status, 409)
    assert.equal(errorOf(other).code, 'idempotency_conflict')
  })

  test('refusals name the field: a missing variable, CR/LF into the subject, fields beside a template', async (t) => {
    const { transport, s } = await setup(t)
    await s.client.post('/api/templates', { name: 'note', subject: 'For {{ who }}', html: '<p>{{ body }} {{ sign }}</p>' })

    const missing = await s.send({ to: 'a@example.com', template: { name: 'note', variables: { who: 'x' } } })
    assert.equal(missing.status, 422)
    assert.equal(errorOf(missing).code, 'template_invalid')
    assert.deepEqual(errorOf(missing).details?.map((d) => d.path), ['body.template.variables.body', 'body.template.variables.sign'])

    const crlf = await s.send({ to: 'a@example.com', template: { name: 'note', variables: { who: 'x\r\nBcc: victim@example.com', body: 'b', sign: 's' } } })
    assert.equal(crlf.status, 422)
    assert.deepEqual(errorOf(crlf).details?.map((d) => d.path), ['body.template.variables.who'])

    const both = await s.send({ to: 'a@example.com', subject: 'Hi', template: { name: 'note', variables: { who: 'x', body: 'b', sign: 's' } } })
    assert.equal(both.status, 422)
    assert.equal(errorOf(both).code, 'template_invalid')
    assert.deepEqual(errorOf(both).details?.map((d) => d.path), ['body.subject'])

    const neither = await s.send({ to: 'a@example.com', template: { variables: {} } })
    assert.equal(neither.status, 400)
    const none = await s.send({ to: 'a@example.com', text: 'no subject' })
    assert.equal(none.status, 400)
    assert.ok(errorOf(none).details?.some((d) => d.path === 'body.subject'))
    assert.equal(transport.sent().length, 0, 'nothing was sent')
  })

  test('preview renders without sending; its refusals are the send\'s', async (t) => {
    const { transport, s } = await setup(t)
    const tpl = (await s.client.post('/api/templates', receipt)).body.data
    const res = await s.client.post(`/api/templates/${tpl.id}/preview`, { variables: { name: '<i>Ann</i>', order: 7 } })
    assert.equal(res.status, 200, res.text)
    assert.equal(res.body.data.subject, 'Receipt for order 7')
    assert.equal(res.body.data.html, '<p>Hello &lt;i&gt;Ann&lt;/i&gt;,</p><ul></ul><p>Thanks!</p>')
    assert.equal(res.body.data.text, 'Hello <i>Ann</i>, order 7. Thanks!')
    const missing = await s.client.post(`/api/templates/${tpl.id}/preview`, {})
    assert.equal(missing.status, 422)
    assert.deepEqual(errorOf(missing).details?.map((d) => d.path), ['body.variables.order', 'body.variables.name'])
    assert.equal(transport.sent().length, 0)
  })

  test('a batch of 100 sends of one template, each with its own variables', async (t) => {
    const { transport, s } = await setup(t)
    await s.client.post('/api/templates', { name: 'hello', subject: 'Hello {{ n }}', text: 'Number {{ n }} for {{ who }}' })
    const batch = Array.from({ length: 100 }, (_, n) => ({ to: `r${n}@example.com`, template: { name: 'hello', variables: { n, who: `reader ${n}` } } }))
    const res = await s.batch(batch)
    assert.equal(res.status, 202, res.text)
    assert.equal(res.body.data.length, 100)
    const last = await s.settled(res.body.data[99].id)
    assert.equal(last.subject, 'Hello 99')
    await s.settled(res.body.data[0].id)
    for (const [n, { id }] of (res.body.data as Array<{ id: string }>).entries()) {
      const copy = copyOf(transport, id)
      assert.equal(copy.subject, `Hello ${n}`)
      assert.equal(copy.text, `Number ${n} for reader ${n}`)
    }
  })

  test('hostile templates are refused at save or cut off at render; another account sends meanwhile', async (t) => {
    const { server, s } = await setup(t)
    const c = s.client
    const save = (name: string, html: string) => c.post('/api/templates', { name, subject: 'x', html })

    const megabyte = await save('mega', '{{ a }}'.repeat(150_000))
    assert.equal(megabyte.status, 413, 'a megabyte of tags is over the body limit')
    const manyTags = await save('tags', '{{ a }}'.repeat(TEMPLATE_LIMITS.tags + 1))
    assert.equal(manyTags.status, 422)
    assert.match(errorOf(manyTags).details?.[0]?.message ?? '', /more than 1000 tags/)
    const deep = await save('deep', '{% if a %}'.repeat(100) + '{% endif %}'.repeat(100))
    assert.equal(deep.status, 422)
    assert.match(errorOf(deep).details?.[0]?.message ?? '', /nests blocks more than 20 deep/)
    const include = await save('include', '{% include "/etc/passwd" %}')
    assert.equal(include.status, 422)
    assert.match(errorOf(include).details?.[0]?.message ?? '', /tag "include" not found/)

    const huge = (await save('range', '{% for i in (1..1000000000) %}x{% endfor %}')).body.data
    const loops = (await save('loops', '{% for a in (1..1000) %}{% for b in (1..1000) %}{% for c in (1..1000) %}{{ c }}{% endfor %}{% endfor %}{% endfor %}')).body.data
    assert.ok(huge?.id && loops?.id, 'a loop is a fine thing to save; it is bounded when it runs')

    // Another account sends plain mail while the hostile one renders.
    const other = await sender(server)
    const hostile = Promise.all([
      s.send({ to: 'a@example.com', template: { id: huge.id } }),
      s.send({ to: 'a@example.com', template: { id: loops.id } }),
      c.post(`/api/templates/${loops.id}/preview`, {}),
    ])
    const plain = Promise.all(Array.from({ length: 10 }, (_, i) => other.send({ to: `b${i}@example.com`, subject: 'Fine', text: 'fine' })))
    const [refused, accepted] = await Promise.all([hostile, plain])
    assert.deepEqual(accepted.map((r) => r.status), Array(10).fill(202))
    const [range, nested, preview] = refused
    assert.equal(range.status, 422)
    assert.match(errorOf(range).details?.[0]?.message ?? '', /memory bound/)
    for (const r of [nested, preview]) {
      // The render stopped at its bound (or, once the account's render time is spent, was not started).
      assert.ok(r.status === 422 || r.status === 429, r.text)
      if (r.status === 422) assert.match(errorOf(r).details?.[0]?.message ?? '', /longer than its bound|memory bound/)
    }
    for (const r of accepted) assert.equal((await other.settled(r.body.data.id)).status, 'delivered')
  })

  test('the plan caps the templates an account keeps', async (t) => {
    const { s } = await setup(t)
    for (let i = 0; i < 20; i++) assert.equal((await s.client.post('/api/templates', { name: `t${i}`, subject: 's', text: 't' })).status, 201)
    const over = await s.client.post('/api/templates', { name: 't20', subject: 's', text: 't' })
    assert.equal(over.status, 403)
    assert.equal(errorOf(over).code, 'plan_limit_reached')
    assert.match(errorOf(over).message, /Free plan allows 20 templates/)
  })
})
