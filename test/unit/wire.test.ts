import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import type { DeliveryResult, DeliveryTask } from '../../src/delivery/http-sender.js'
import type { DeliveryWork } from '../../src/store/deliveries.js'
import { packTasks, packWork, ResultPacker, unpackResults, unpackTasks } from '../../src/delivery/wire.js'

function task (id: string, webhookId: string, secrets = ['whsec_a']): DeliveryTask {
  return { deliveryId: id, webhookId, url: `http://127.0.0.1/${webhookId}`, event: 'email.sent', body: `{"id":"${id}"}`, secrets }
}

describe('between threads', () => {
  test('deliveries survive packing unchanged and in order, grouped by webhook and secrets', () => {
    const tasks = [
      task('d1', 'wh_a'), task('d2', 'wh_a', ['whsec_a']), task('d3', 'wh_b'),
      task('d4', 'wh_a', ['whsec_new', 'whsec_a']), task('d5', 'wh_a', ['whsec_new', 'whsec_a']),
    ]
    const groups = packTasks(tasks)
    assert.deepEqual(groups.map((g) => [g.webhookId, g.ids]), [['wh_a', ['d1', 'd2']], ['wh_b', ['d3']], ['wh_a', ['d4', 'd5']]],
      'equal secret lists share a group even as different arrays; a rotation starts a new one')
    assert.deepEqual(unpackTasks(structuredClone(groups)), tasks)
  })

  test('the store\'s work packs straight into the same groups, and every id is marked open', () => {
    const tasks = [task('d1', 'wh_a'), task('d2', 'wh_b'), task('d3', 'wh_b', ['whsec_new', 'whsec_a']), task('d4', 'wh_a')]
    const works: DeliveryWork[] = tasks.map((t, i) => ({
      id: t.deliveryId, webhookId: t.webhookId, url: t.url, secrets: t.secrets, event: 'email.sent', payload: t.body, attempts: i, eventAt: 0, lease: 7,
    }))
    const open = new Set<string>()
    const groups = packWork(works, open)
    assert.deepEqual(groups, packTasks(tasks))
    assert.deepEqual(unpackTasks(structuredClone(groups)), tasks)
    assert.deepEqual([...open], ['d1', 'd2', 'd3', 'd4'])
  })

  test('results survive packing: delivered ones as arrays, anything else whole', () => {
    const results: DeliveryResult[] = [
      { deliveryId: 'd1', outcome: 'delivered', status: 200, durationMs: 3 },
      { deliveryId: 'd2', outcome: 'retry', status: 503, error: 'receiver answered 503', retryAfterMs: 1000, durationMs: 4 },
      { deliveryId: 'd3', outcome: 'returned', durationMs: 0 },
      { deliveryId: 'd4', outcome: 'delivered', status: 204, durationMs: 1 },
    ]
    const packer = new ResultPacker()
    for (const r of results) packer.push(r)
    assert.equal(packer.size, 4)
    const batch = structuredClone(packer.take())
    assert.equal(packer.size, 0, 'take empties the packer')
    const byId = (list: DeliveryResult[]) => [...list].sort((a, b) => a.deliveryId.localeCompare(b.deliveryId))
    assert.deepEqual(byId(unpackResults(batch)), results)
  })
})
