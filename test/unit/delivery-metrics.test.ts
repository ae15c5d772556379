// The engine's cheap metrics read exactly as prom-client's own would: the same /metrics text for the
// same observations, so a dashboard or alert built on them cannot tell the difference.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { Histogram, Registry } from 'prom-client'
import { createDeliveryMetrics } from '../../src/delivery/metrics.js'
import { PlainHistogram } from '../../src/delivery/plain-histogram.js'

const BOUNDS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10]
const VALUES = [0, 0.001, 0.0010001, 0.004, 0.005, 0.3, 0.5, 2, 10, 11, 1e6, 0.05]

describe('delivery metrics', () => {
  test('PlainHistogram: the same text as prom-client\'s Histogram, empty and after observations', async () => {
    const ours = new Registry()
    const theirs = new Registry()
    const plain = new PlainHistogram('svc_x_seconds', 'What x took', BOUNDS, [ours])
    const reference = new Histogram({ name: 'svc_x_seconds', help: 'What x took', buckets: BOUNDS, registers: [theirs] })
    assert.equal(await ours.metrics(), await theirs.metrics(), 'nothing observed')
    for (const v of VALUES) {
      plain.observe(v)
      reference.observe(v)
    }
    assert.equal(await ours.metrics(), await theirs.metrics())
    assert.match(await ours.metrics(), /svc_x_seconds_bucket\{le="0.005"\} 5\n/, 'le is inclusive: 0.005 is in its bucket')
    plain.reset()
    const fresh = new Registry()
    const again = new Histogram({ name: 'svc_x_seconds', help: 'What x took', buckets: BOUNDS, registers: [fresh] })
    assert.ok(again instanceof Histogram)
    assert.equal(await ours.metrics(), await fresh.metrics(), 'after a reset, as new')
  })

  test('bounds that do not increase are refused', () => {
    assert.throws(() => new PlainHistogram('svc_y', 'y', [1, 1], []), RangeError)
  })

  test('outcomes counted one addition each show in svc_deliveries_total when /metrics is read, and keep adding up', async () => {
    const registry = new Registry()
    const metrics = createDeliveryMetrics(registry, {
      stats: async () => ({ pending: 0, retrying: 0, unroutedEvents: 0, oldestPendingAt: null }),
      inFlight: () => 0,
      breakers: () => ({ open: 0, half_open: 0 }),
      utilization: () => [],
    })
    for (let i = 0; i < 3; i++) metrics.countOutcome('succeeded')
    metrics.countOutcome('retry')
    let text = await registry.metrics()
    assert.match(text, /^svc_deliveries_total\{outcome="succeeded"\} 3$/m)
    assert.match(text, /^svc_deliveries_total\{outcome="retry"\} 1$/m)
    metrics.countOutcome('succeeded')
    text = await registry.metrics()
    assert.match(text, /^svc_deliveries_total\{outcome="succeeded"\} 4$/m, 'counted on top of what was read before')
  })
})
