// Metrics outside the HTTP layer (src/http/metrics.ts), the delivery engine (src/delivery/metrics.ts) and
// the mail queue: the store seen from the service (each operation's duration and failures, whether it can
// write, the webhooks by status), the email events as they are stored, and the Node.js process. The
// dashboard and alert rules in ops/ are written against these names; test/integration/ops.test.ts checks
// that every name they use is served.
import { collectDefaultMetrics, Counter, Gauge, Histogram, type Registry } from 'prom-client'
import type { EventRecord, EventType, StoredEventType } from './domain/events.js'
import type { AcceptResult, UnsubscribeResult } from './store/emails.js'
import type { Store } from './store/types.js'

/**
 * prom-client's defaults, less the three gauges named `*_total` (nodejs_active_handles_total,
 * _requests_total, _resources_total) that `promtool check metrics` flags: only counters end in _total.
 * Their values are the sums of nodejs_active_handles, nodejs_active_requests and nodejs_active_resources,
 * which stay.
 */
export function registerProcessMetrics (registry: Registry): void {
  collectDefaultMetrics({ register: registry })
  for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) {
    registry.removeSingleMetric(name)
  }
}

type Counted = (args: unknown[], result: unknown) => Iterable<StoredEventType>

/**
 * Which store operations store email events, and which events they stored. Test events
 * (insertTestDelivery) are left out: they are nobody's email.
 */
const EVENTS_STORED: Record<string, Counted> = {
  insertEvents: (args) => (args[0] as EventRecord[]).map((e) => e.type),
  acceptEmails: (args, result) =>
    (result as AcceptResult).outcome === 'accepted' ? (args[0] as { events: EventRecord[] }).events.map((e) => e.type) : [],
  recordEmailAttempt: (args, result) => (result === true ? (args[0] as { events: EventRecord[] }).events.map((e) => e.type) : []),
  recordEngagement: (_args, result) => (result === null ? [] : [(result as EventRecord).type]),
  unsubscribeRecipient: (args, result) => ((result as UnsubscribeResult) === 'unsubscribed' ? [(args[0] as { type: EventType }).type] : []),
  // Bounces and complaints heard from returning mail (DSN, ARF), and the timeline-only delays.
  recordReturnedMail: (args, result) => (result === 'recorded' ? [(args[0] as { event: EventRecord }).event.type] : []),
}

/**
 * The store as the service uses it, measured: every asynchronous operation's duration by name
 * (svc_store_operation_duration_seconds) and failures (svc_store_errors_total), the events stored by
 * type (svc_events_total), plus gauges read at scrape time (svc_store_writable, svc_webhooks). The store
 * underneath is unchanged; only the service's calls go through this.
 */
export function instrumentStore (store: Store, registry: Registry): Store {
  const registers = [registry]
  const duration = new Histogram({
    name: 'svc_store_operation_duration_seconds',
    help: 'Store operations called by this node, by operation (the Store method), from call to durable result',
    labelNames: ['op'] as const,
    buckets: [0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5],
    registers,
  })
  const errors = new Counter({
    name: 'svc_store_errors_total',
    help: 'Store operations that failed, by operation',
    labelNames: ['op'] as const,
    registers,
  })
  const events = new Counter({
    name: 'svc_events_total',
    help: 'Email events stored by this node, by type (email.sent, email.delivered, email.complained, ...)',
    labelNames: ['type'] as const,
    registers,
  })
  new Gauge({
    name: 'svc_store_writable',
    help: '1 while the store takes writes, 0 while it cannot (disk full, read-only, no writable primary: see /readyz)',
    registers,
    collect () { this.set(store.health.current().state === 'ok' ? 1 : 0) },
  })
  new Gauge({
    name: 'svc_webhooks',
    help: 'Webhooks of every account by status (enabled, disabled, auto_disabled); the same on every node',
    labelNames: ['status'] as const,
    registers,
    async collect () {
      const counts = await store.countWebhooksByStatus()
      for (const [status, n] of Object.entries(counts)) this.set({ status }, n)
    },
  })

  if (store.onDiskFlush) {
    const flushes = new Histogram({
      name: 'svc_store_disk_flush_seconds',
      help: 'Flushes of the store\'s log to disk (SQLite: fdatasync of the WAL), which every durable write waits for',
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
      registers,
    })
    store.onDiskFlush((seconds) => flushes.observe(seconds))
  }
  if (store.onCheckpoint) {
    const checkpoints = new Histogram({
      name: 'svc_store_checkpoint_seconds',
      help: 'Checkpoints of the store\'s log run in the background (SQLite: the WAL copied into the database file by its own thread), by result (ok, failed)',
      labelNames: ['result'] as const,
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5],
      registers,
    })
    store.onCheckpoint(({ ok, seconds }) => checkpoints.observe({ result: ok ? 'ok' : 'failed' }, seconds))
  }

  const wrapped = new Map<PropertyKey, unknown>()
  const wrap = (op: string, fn: (...args: unknown[]) => unknown) => {
    // Bound at the first call, so a property only looked at (constructor, …) makes no series.
    let timer: ReturnType<typeof duration.labels> | undefined
    const counted = EVENTS_STORED[op]
    return (...args: unknown[]): unknown => {
      const start = performance.now()
      const result = fn.apply(store, args)
      if (!(result instanceof Promise)) return result
      timer ??= duration.labels(op)
      return result.then((value: unknown) => {
        timer!.observe((performance.now() - start) / 1000)
        if (counted) for (const type of counted(args, value)) events.inc({ type })
        return value
      }, (err: unknown) => {
        timer!.observe((performance.now() - start) / 1000)
        errors.inc({ op })
        throw err
      })
    }
  }
  return new Proxy(store, {
    get (target, prop) {
      const value = Reflect.get(target, prop, target) as unknown
      if (typeof value !== 'function' || typeof prop !== 'string') return value
      let fn = wrapped.get(prop)
      if (fn === undefined) {
        fn = wrap(prop, value as (...args: unknown[]) => unknown)
        wrapped.set(prop, fn)
      }
      return fn
    },
  })
}
