import assert from 'node:assert/strict'
import { test } from 'node:test'
import { EVENT_TYPES } from '../../src/domain/events.js'
import { signedUp, startServer } from '../helpers/server.js'
import { eventually, startReceiver } from '../helpers/receiver.js'

test('a test event has the shape of a real one: a click names a link, a bounce and a complaint a reason', async (t) => {
  const receiver = await startReceiver(t)
  const server = await startServer(t, { env: { DELIVERY_THREADS: '1' } })
  const { client } = await signedUp(server)
  const hook = await client.post('/api/webhooks', { url: receiver.url('/all'), events: [...EVENT_TYPES] })
  assert.equal(hook.status, 201)
  for (const event of EVENT_TYPES) {
    assert.equal((await client.post(`/api/webhooks/${hook.body.data.id}/test`, { event })).status, 202, event)
  }
  const got = await eventually(async () => {
    const all = receiver.on('/all')
    return all.length === EVENT_TYPES.length ? all : undefined
  }, 'one delivery per event type')
  const byType = new Map(got.map((r) => [r.body.type as string, r.body]))
  const clicked = byType.get('email.clicked')
  assert.equal(typeof clicked.data?.url, 'string', 'a test click names the link that was clicked')
  assert.equal(new URL(clicked.data.url).protocol, 'https:')
  assert.match(byType.get('email.bounced').data?.reason ?? '', /\S/)
  assert.match(byType.get('email.complained').data?.reason ?? '', /\S/)
  for (const type of ['email.sent', 'email.delivered', 'email.opened', 'email.unsubscribed']) {
    assert.equal(byType.get(type).data, undefined, `${type} carries no data, like a real one`)
  }
})
