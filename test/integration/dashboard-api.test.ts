// What the dashboard reads and how it is served: GET /api/emails, GET /api/stats and GET /api/emails/:id
// with either the session cookie or an API key, the suppression lookup, and the static files at / with
// their Content-Security-Policy and ETags.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { errorOf, signedUp, startServer } from '../helpers/server.js'
import { sender } from '../helpers/sending.js'

const basic = (to: string) => ({ to, subject: `Hello ${to}`, text: 'Hi' })

describe('GET /api/emails', () => {
  test('lists the account\'s emails newest first with the cookie or a key, filtered and paged', async (t) => {
    const server = await startServer(t)
    const s = await sender(server)
    const ids: string[] = []
    for (const to of ['ann@example.com', 'bob@example.com', 'bounced@simulator.test', 'Ann@Example.com']) {
      const res = await s.send(basic(to))
      assert.equal(res.status, 202)
      ids.push(res.body.data.id)
      await s.settled(res.body.data.id)
    }
    const other = await sender(server)
    await other.send(basic('ann@example.com'))

    const byCookie = await s.client.get('/api/emails')
    assert.equal(byCookie.status, 200)
    assert.deepEqual(byCookie.body.data.map((e: any) => e.id), [...ids].reverse())
    assert.equal(byCookie.body.nextCursor, null)
    assert.deepEqual(Object.keys(byCookie.body.data[0]).sort(), ['createdAt', 'from', 'id', 'scheduledAt', 'status', 'subject', 'to', 'updatedAt'])

    const byKey = await server.client().get('/api/emails?status=bounced', { 'x-api-key': s.key })
    assert.equal(byKey.status, 200)
    assert.deepEqual(byKey.body.data.map((e: any) => e.id), [ids[2]])

    // A recipient matches whatever its case in the request.
    const ann = await s.client.get('/api/emails?to=ANN%40example.com')
    assert.deepEqual(ann.body.data.map((e: any) => e.id), [ids[3], ids[0]])

    // Pages of one, each email once.
    const seen: string[] = []
    let cursor: string | null = null
    do {
      const res: any = await s.client.get(`/api/emails?limit=1${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`)
      assert.equal(res.status, 200)
      seen.push(...res.body.data.map((e: any) => e.id))
      cursor = res.body.nextCursor
    } while (cursor !== null)
    assert.deepEqual(seen, [...ids].reverse())

    // A window: nothing before the first email's time, everything from it.
    const first = byCookie.body.data.at(-1)
    const before = await s.client.get(`/api/emails?until=${encodeURIComponent(first.createdAt)}`)
    assert.deepEqual(before.body.data, [])
    const from = await s.client.get(`/api/emails?since=${encodeURIComponent(first.createdAt)}`)
    assert.equal(from.body.data.length, 4)
  })

  test('refuses bad filters with one detail per field, and strangers and other origins', async (t) => {
    const server = await startServer(t)
    const { client } = await signedUp(server)
    for (const [query, path] of [
      ['limit=0', 'query.limit'], ['limit=101', 'query.limit'], ['since=yesterday', 'query.since'],
      ['status=lost', 'query.status'], ['cursor=nope', 'query.cursor'], ['colour=red', 'query.colour'],
      ['since=2030-01-02T00:00:00Z&until=2030-01-01T00:00:00Z', 'query.since'],
    ] as const) {
      const res = await client.get(`/api/emails?${query}`)
      assert.equal(res.status, 400, query)
      assert.equal(errorOf(res).code, 'validation_error')
      // Schema errors name the part `querystring` today and the domain's `query`: the field is what counts.
      const field = path.slice('query.'.length)
      assert.ok(errorOf(res).details?.some((d) => d.path.split('.').at(-1) === field), `${query}: ${res.text}`)
    }
    assert.equal(errorOf(await server.client().get('/api/emails')).code, 'authentication_required')
    assert.equal(errorOf(await server.client().get('/api/emails', { 'x-api-key': 'svc_sk_nope' })).code, 'invalid_api_key')
    const foreign = await client.get('/api/emails', { origin: 'https://evil.example' })
    assert.equal(foreign.status, 403)
    assert.equal(errorOf(foreign).code, 'forbidden_origin')
  })
})

describe('GET /api/emails/:id', () => {
  test('answers the email and its timeline with the cookie as with the key; another account\'s is 404', async (t) => {
    const server = await startServer(t)
    const s = await sender(server)
    const id = (await s.send(basic('ann@example.com'))).body.data.id
    const byKey = await s.settled(id)
    const byCookie = await s.client.get(`/api/emails/${id}`)
    assert.equal(byCookie.status, 200)
    assert.deepEqual(byCookie.body.data, byKey)
    const stranger = await signedUp(server)
    assert.equal((await stranger.client.get(`/api/emails/${id}`)).status, 404)
  })
})

describe('GET /api/stats', () => {
  test('counts the window\'s events, per day, with rates beside the thresholds', async (t) => {
    const server = await startServer(t)
    const s = await sender(server)
    for (const to of ['delivered@simulator.test', 'bounced@simulator.test', 'complained@simulator.test', 'delivered+2@simulator.test']) {
      await s.settled((await s.send(basic(to))).body.data.id)
    }
    const res = await s.client.get('/api/stats')
    assert.equal(res.status, 200)
    const { totals, rates, thresholds, daily, since, until } = res.body.data
    assert.equal(totals['email.sent'], 4)
    assert.equal(totals['email.delivered'], 3)
    assert.equal(totals['email.bounced'], 1)
    assert.equal(totals['email.complained'], 1)
    assert.deepEqual(rates, { deliveryRate: 3 / 4, bounceRate: 1 / 4, complaintRate: 1 / 3 })
    assert.deepEqual(thresholds, { complaintRate: { warn: 0.001, limit: 0.003 }, bounceRate: { warn: 0.02, limit: 0.05 } })
    assert.equal(daily.length, 30)
    assert.equal(daily.at(-1).day, new Date().toISOString().slice(0, 10))
    assert.equal(daily.at(-1)['email.sent'], 4)
    assert.ok(Date.parse(until) - Date.parse(since) <= 30 * 86_400_000)

    // The same with the key; an empty window has null rates.
    const byKey = await server.client().get('/api/stats?since=2020-01-01T00:00:00Z&until=2020-01-02T00:00:00Z', { 'x-api-key': s.key })
    assert.equal(byKey.status, 200)
    assert.equal(byKey.body.data.totals['email.sent'], 0)
    assert.deepEqual(byKey.body.data.rates, { deliveryRate: null, bounceRate: null, complaintRate: null })
    assert.deepEqual(byKey.body.data.daily.map((d: any) => d.day), ['2020-01-01'])
  })

  test('test events are not counted, and a window over 90 days or backwards is a 400', async (t) => {
    const server = await startServer(t)
    const { client } = await signedUp(server)
    const hook = await client.post('/api/webhooks', { url: 'http://127.0.0.1:9/hook', events: ['email.sent'] })
    assert.equal(hook.status, 201)
    assert.equal((await client.post(`/api/webhooks/${hook.body.data.id}/test`, {})).status, 202)
    assert.equal((await client.get('/api/stats')).body.data.totals['email.sent'], 0)

    const wide = await client.get('/api/stats?since=2020-01-01T00:00:00Z&until=2020-04-01T00:00:01Z')
    assert.equal(wide.status, 400)
    assert.deepEqual(errorOf(wide).details, [{ path: 'query.since', message: 'must be at most 90 days before until' }])
    const backwards = await client.get('/api/stats?since=2020-01-02T00:00:00Z&until=2020-01-01T00:00:00Z')
    assert.deepEqual(errorOf(backwards).details, [{ path: 'query.since', message: 'must be before until' }])
  })
})

describe('GET /api/suppressions/:email', () => {
  test('answers the entry of a suppressed address, 404 otherwise', async (t) => {
    const server = await startServer(t)
    const { client } = await signedUp(server)
    await client.post('/api/suppressions', { email: 'gone@example.com' })
    const found = await client.get('/api/suppressions/GONE%40example.com')
    assert.equal(found.status, 200)
    assert.equal(found.body.data.email, 'gone@example.com')
    assert.equal(found.body.data.reason, 'manual')
    assert.equal(errorOf(await client.get('/api/suppressions/here%40example.com')).code, 'not_found')
  })
})

describe('the dashboard\'s files', () => {
  test('/ is the page, under a strict CSP; assets have their types; ETags answer 304; other paths 404', async (t) => {
    const server = await startServer(t)
    const client = server.client()
    const page = await client.get('/')
    assert.equal(page.status, 200)
    assert.match(String(page.headers['content-type']), /^text\/html; charset=utf-8/)
    const csp = String(page.headers['content-security-policy'])
    assert.match(csp, /default-src 'self'/)
    assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|https?:/)
    assert.equal(page.headers['x-content-type-options'], 'nosniff')
    assert.equal(page.headers['x-frame-options'], 'DENY')
    // No inline script or style in the page itself, and nothing fetched from elsewhere.
    assert.doesNotMatch(page.text, /<script(?![^>]*\bsrc=)[^>]*>/)
    assert.doesNotMatch(page.text, /<style|\sstyle=/)
    assert.doesNotMatch(page.text, /https?:\/\//)
    const scripts = [...page.text.matchAll(/<script[^>]*src="([^"]+)"/g)].map((m) => m[1]!)
    assert.ok(scripts.length > 0)
    for (const src of scripts) {
      const js = await client.get(src)
      assert.equal(js.status, 200, src)
      assert.match(String(js.headers['content-type']), /^text\/javascript/)
    }
    const css = await client.get('/app.css')
    assert.match(String(css.headers['content-type']), /^text\/css/)

    const etag = String(css.headers.etag)
    const again = await client.get('/app.css', { 'if-none-match': etag })
    assert.equal(again.status, 304)
    assert.equal(again.text, '')
    assert.equal(again.headers['content-security-policy'], csp)

    for (const path of ['/../package.json', '/js/../../package.json', '/nope.js', '/web/index.html', '/%2e%2e/package.json']) {
      const res = await client.get(path)
      assert.equal(res.status, 404, path)
    }
    // Swagger UI stays at /docs.
    assert.equal((await client.get('/docs/')).status, 200)
  })
})
