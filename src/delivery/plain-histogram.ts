// A histogram without labels whose observe() is a bucket search and three additions. prom-client's
// Histogram allocates on every observe (a closure, a labels object, a label hash): on the engine's path,
// where each delivery is observed three times, that was a third of the engine's own CPU per delivery.
// The registry reads this one like any other metric; its text is the same as prom-client's (tested in
// test/unit/delivery-metrics.test.ts).
import type { Registry } from 'prom-client'

interface Sample { labels: Record<string, string | number>; value: number; metricName: string }

export class PlainHistogram {
  readonly type = 'histogram'
  readonly aggregator = 'sum'
  /** Observations per bucket (not cumulative); the last one is past every bound (+Inf). */
  private readonly counts: Float64Array
  private sum = 0
  private count = 0

  constructor (readonly name: string, readonly help: string, private readonly bounds: readonly number[], registers: Registry[]) {
    if (bounds.some((b, i) => i > 0 && b <= bounds[i - 1]!)) throw new RangeError(`${name}: bucket bounds must increase`)
    this.counts = new Float64Array(bounds.length + 1)
    for (const registry of registers) registry.registerMetric(this as unknown as Parameters<Registry['registerMetric']>[0])
  }

  observe (value: number): void {
    if (!Number.isFinite(value)) return
    const bounds = this.bounds
    let i = 0
    while (i < bounds.length && value > bounds[i]!) i++
    this.counts[i]! += 1
    this.sum += value
    this.count += 1
  }

  /** What the registry reads: cumulative buckets, +Inf, sum and count, as prom-client writes them. */
  get (): { name: string; help: string; type: 'histogram'; aggregator: 'sum'; values: Sample[] } {
    const values: Sample[] = []
    const bucket = `${this.name}_bucket`
    let acc = 0
    for (let i = 0; i < this.bounds.length; i++) {
      acc += this.counts[i]!
      values.push({ labels: { le: this.bounds[i]! }, value: acc, metricName: bucket })
    }
    values.push({ labels: { le: '+Inf' }, value: this.count, metricName: bucket })
    values.push({ labels: {}, value: this.sum, metricName: `${this.name}_sum` })
    values.push({ labels: {}, value: this.count, metricName: `${this.name}_count` })
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values }
  }

  reset (): void {
    this.counts.fill(0)
    this.sum = 0
    this.count = 0
  }
}
