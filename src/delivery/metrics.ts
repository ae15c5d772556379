import { Counter, Gauge, type Registry } from 'prom-client'
import type { DeliveryStats } from '../store/deliveries.js'
import { PlainHistogram } from './plain-histogram.js'

export interface EngineProbe {
  stats(): Promise<DeliveryStats>
  inFlight(): number
  breakers(): { open: number; half_open: number }
  utilization(): number[]
  /** The OS thread id of each delivery thread, where known. */
  threadIds?(): Array<number | undefined>
  /** The adaptive window of every webhook actor on this node (no webhook ids: the metric has no label per webhook). */
  windows?(): number[]
}

export function createDeliveryMetrics (registry: Registry, probe: EngineProbe) {
  const registers = [registry]
  // Outcomes are counted here, one addition each, and handed to the counter when /metrics is read:
  // prom-client's inc() with a label hashes the label on every call.
  const outcomeCounts = new Map<string, number>()
  return {
    countOutcome (kind: string): void {
      outcomeCounts.set(kind, (outcomeCounts.get(kind) ?? 0) + 1)
    },
    outcomes: new Counter({
      name: 'svc_deliveries_total',
      help: 'Delivery attempts by outcome (succeeded, retry, failed, gone), and work handed back to the store unattempted (deferred: breaker or pause; parked: the webhook actor is full)',
      labelNames: ['outcome'] as const,
      registers,
      collect () {
        for (const [outcome, n] of outcomeCounts) this.inc({ outcome }, n)
        outcomeCounts.clear()
      },
    }),
    staleOutcomes: new Counter({
      name: 'svc_delivery_stale_outcomes_total',
      help: 'Outcomes not applied because their lease had been lost (another node took the delivery over, or the outcome was written twice)',
      registers,
    }),
    // The three observed at every delivery are PlainHistograms (see plain-histogram.ts).
    attempts: new PlainHistogram('svc_delivery_attempts', 'Attempts a delivery took, observed when it succeeds or fails for good',
      [1, 2, 3, 4, 6, 8, 11], registers),
    latency: new PlainHistogram('svc_delivery_latency_seconds', 'From the event to the 2xx that delivered it',
      [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30, 120, 600, 3600, 86400], registers),
    requestDuration: new PlainHistogram('svc_delivery_request_duration_seconds', 'One HTTP attempt, from connect to the last body byte',
      [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10], registers),
    depth: new Gauge({
      name: 'svc_delivery_queue_depth',
      help: 'Deliveries waiting (pending: not yet attempted or due now; retrying: failed, retry scheduled) and events not yet routed',
      labelNames: ['state'] as const,
      registers,
      async collect () {
        const s = await probe.stats()
        this.set({ state: 'pending' }, s.pending)
        this.set({ state: 'retrying' }, s.retrying)
        this.set({ state: 'unrouted_events' }, s.unroutedEvents)
      },
    }),
    oldest: new Gauge({
      name: 'svc_delivery_oldest_pending_age_seconds',
      help: 'Age of the oldest event not yet delivered (0 when none)',
      registers,
      async collect () {
        const s = await probe.stats()
        this.set(s.oldestPendingAt === null ? 0 : Math.max(0, (Date.now() - s.oldestPendingAt) / 1000))
      },
    }),
    inFlight: new Gauge({
      name: 'svc_delivery_in_flight',
      help: 'Deliveries held by this node: queued in actors or being sent',
      registers,
      collect () { this.set(probe.inFlight()) },
    }),
    breakers: new Gauge({
      name: 'svc_delivery_breakers',
      help: 'Webhook actors whose circuit breaker is open or half-open',
      labelNames: ['state'] as const,
      registers,
      collect () {
        const b = probe.breakers()
        this.set({ state: 'open' }, b.open)
        this.set({ state: 'half_open' }, b.half_open)
      },
    }),
    utilization: new Gauge({
      name: 'svc_delivery_worker_utilization',
      help: 'Share of time each delivery worker thread was busy (0 to 1)',
      labelNames: ['worker'] as const,
      registers,
      collect () {
        probe.utilization().forEach((u, i) => this.set({ worker: String(i) }, u))
      },
    }),
    // The windows as a few statistics, never one series per webhook (their number is unbounded).
    window: new Gauge({
      name: 'svc_delivery_window',
      help: 'Adaptive in-flight windows of the webhook actors on this node: smallest, median and largest (stat), and how many actors (stat="actors")',
      labelNames: ['stat'] as const,
      registers,
      collect () {
        const w = (probe.windows?.() ?? []).sort((a, b) => a - b)
        this.set({ stat: 'actors' }, w.length)
        this.set({ stat: 'min' }, w[0] ?? 0)
        this.set({ stat: 'median' }, w[Math.floor(w.length / 2)] ?? 0)
        this.set({ stat: 'max' }, w.at(-1) ?? 0)
      },
    }),
    pushbacks: new Counter({
      name: 'svc_delivery_pushbacks_total',
      help: 'Attempts the receiver pushed back (429/503 while it still answers): the window shrank and the delivery waited a moment, no retry step',
      registers,
    }),
    redrives: new Counter({
      name: 'svc_delivery_redriven_total',
      help: 'Waiting deliveries made due at once because their endpoint answered 2xx again after an outage, or was enabled again',
      registers,
    }),
    // So that a profiler or the benchmarks can read each delivery thread's CPU in /proc/<pid>/task/<tid>.
    threadId: new Gauge({
      name: 'svc_delivery_worker_thread_id',
      help: 'The operating system thread id of each delivery worker thread (Linux; absent until the thread starts)',
      labelNames: ['worker'] as const,
      registers,
      collect () {
        this.reset()
        probe.threadIds?.().forEach((tid, i) => { if (tid !== undefined) this.set({ worker: String(i) }, tid) })
      },
    }),
  }
}

export type DeliveryMetrics = ReturnType<typeof createDeliveryMetrics>
