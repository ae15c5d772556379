// The operator's files (ops/): the Grafana dashboard and the Prometheus alert rules are written against
// svc's /metrics, so every metric name they use must be one svc serves. Checked against the real server
// process (the metrics an operator scrapes, prom-client's process metrics included) after it has done a
// little of everything; and, where promtool is installed (Debian: apt-get install prometheus), by
// promtool itself.
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { before, describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import { startServerProcess } from '../helpers/process.js'
import { eventually, startReceiver } from '../helpers/receiver.js'
import { Client, PASSWORD, tempDir, uniqueEmail } from '../helpers/server.js'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
const DASHBOARD = path.join(root, 'ops', 'grafana', 'svc.json')
const RULES = path.join(root, 'ops', 'prometheus', 'svc-alerts.yml')
const RULE_TESTS = path.join(root, 'ops', 'prometheus', 'svc-alerts.test.yml')

/** Every metric name a file mentions (svc's own, Node's and the process's). */
function metricNames (text: string): string[] {
  return [...new Set(text.match(/\b(?:svc|nodejs|process)_[a-z0-9_]*[a-z0-9]\b/g) ?? [])].sort()
}

/** name → type, from the # TYPE lines of an exposition. */
function exposed (text: string): Map<string, string> {
  const types = new Map<string, string>()
  for (const line of text.split('\n')) {
    const m = /^# TYPE (\S+) (\S+)$/.exec(line)
    if (m) types.set(m[1]!, m[2]!)
  }
  return types
}

/** Whether `name` is served: as itself, or as a histogram's or summary's _bucket, _sum or _count. */
function served (types: Map<string, string>, name: string): boolean {
  if (types.has(name)) return true
  const m = /^(.*)_(bucket|sum|count)$/.exec(name)
  return m !== null && (types.get(m[1]!) === 'histogram' || (m[2] !== 'bucket' && types.get(m[1]!) === 'summary'))
}

function promtool (args: string[], input?: string) {
  const r = spawnSync('promtool', args, { encoding: 'utf8', ...(input !== undefined ? { input } : {}) })
  if (r.error !== undefined && 'code' in r.error && r.error.code === 'ENOENT') return null
  return { status: r.status, output: `${r.stdout}${r.stderr}` }
}
const NO_PROMTOOL = 'promtool is not installed (Debian: apt-get install prometheus); skipped'

describe('ops: the dashboard and the alert rules against svc\'s /metrics', () => {
  let metrics = ''

  before(async () => {
    // One svc process that has served requests, accepted and sent an email, and delivered its events.
    // Its receiver and process are stopped as soon as /metrics is read: the tests use the text.
    const cleanups: Array<() => unknown> = []
    const t = { after: (fn: () => unknown) => { cleanups.push(fn) } }
    try {
      const receiver = await startReceiver(t)
      // The inbound listener on (a free port on loopback): its svc_inbound_messages_total is on the board.
      const svc = await startServerProcess(t, { DATA_DIR: tempDir(t), DELIVERY_THREADS: '1', INBOUND_SMTP_PORT: '0', INBOUND_SMTP_HOST: '127.0.0.1' })
      const client = new Client(svc.url)
      assert.equal((await client.post('/api/auth/signup', { email: uniqueEmail('ops'), password: PASSWORD })).status, 201)
      const key = (await client.post('/api/keys', { name: 'ops' })).body.data.key as string
      const hook = await client.post('/api/webhooks', { url: receiver.url('/ops'), events: ['email.sent', 'email.delivered'] })
      assert.equal(hook.status, 201, hook.text)
      const sent = await client.post('/api/send', { to: 'delivered@simulator.test', subject: 'ops', text: 'hi' }, { 'x-api-key': key })
      assert.equal(sent.status, 202, sent.text)
      await eventually(async () => (receiver.on('/ops').length >= 2 ? true : undefined), 'the sent and delivered webhooks')
      // The delivery outcome is counted once the engine has written it.
      metrics = await eventually(async () => {
        const text = await (await fetch(`${svc.url}/metrics`)).text()
        return /^svc_deliveries_total\{outcome="succeeded"\} [1-9]/m.test(text) ? text : undefined
      }, 'the deliveries in /metrics')
    } finally {
      for (const fn of cleanups.reverse()) await fn()
    }
  })

  test('every metric the alert rules and the dashboard use is served by svc', () => {
    const types = exposed(metrics)
    for (const file of [RULES, DASHBOARD, RULE_TESTS]) {
      const names = metricNames(readFileSync(file, 'utf8'))
      assert.ok(names.length > 0, `${file} names metrics`)
      const missing = names.filter((n) => !served(types, n))
      assert.deepEqual(missing, [], `${path.relative(root, file)} uses metrics svc does not serve`)
    }
  })

  test('the new metrics carry what happened: events by type, store operations, a writable store, webhooks by status', () => {
    assert.match(metrics, /^svc_events_total\{type="email\.sent"\} 1$/m)
    assert.match(metrics, /^svc_events_total\{type="email\.delivered"\} 1$/m)
    assert.match(metrics, /^svc_store_operation_duration_seconds_count\{op="acceptEmails"\} 1$/m)
    assert.match(metrics, /^svc_store_writable 1$/m)
    assert.match(metrics, /^svc_webhooks\{status="enabled"\} 1$/m)
    assert.match(metrics, /^svc_webhooks\{status="auto_disabled"\} 0$/m)
    assert.match(metrics, /^nodejs_eventloop_lag_p99_seconds /m)
    assert.match(metrics, /^process_resident_memory_bytes /m)
    assert.doesNotMatch(metrics, /^nodejs_active_handles_total/m, 'a gauge named _total is not served')
    assert.match(metrics, /^nodejs_active_handles\{/m, 'the per-type handles stay')
  })

  test('the dashboard imports with a Prometheus of the importer\'s choice', () => {
    const dash = JSON.parse(readFileSync(DASHBOARD, 'utf8'))
    assert.deepEqual(dash.__inputs.map((i: { name: string; type: string; pluginId: string }) => [i.name, i.type, i.pluginId]),
      [['DS_PROMETHEUS', 'datasource', 'prometheus']])
    const panels = dash.panels.filter((p: { type: string }) => p.type !== 'row')
    assert.ok(panels.length >= 12)
    const ids = dash.panels.map((p: { id: number }) => p.id)
    assert.equal(new Set(ids).size, ids.length, 'panel ids are unique')
    for (const p of panels) {
      assert.deepEqual(p.datasource, { type: 'prometheus', uid: '${DS_PROMETHEUS}' }, p.title)
      assert.ok(p.targets.length > 0, p.title)
      for (const target of p.targets) assert.match(target.expr, /\b(svc|nodejs|process)_/, p.title)
      assert.ok(p.gridPos.x + p.gridPos.w <= 24, `${p.title} fits the grid`)
    }
    const titles = panels.map((p: { title: string }) => p.title.toLowerCase()).join(' | ')
    for (const topic of ['requests by route', 'latency p99 by route', 'sends accepted', 'events by type', 'deliveries by outcome',
      'delivery latency', 'queue depth', 'oldest', 'breakers', 'store operation latency', 'event-loop lag', 'resident memory', 'store writable']) {
      assert.ok(titles.includes(topic), `a panel about ${topic}`)
    }
  })

  test('promtool accepts the rules, their unit tests pass, and it finds nothing to flag in /metrics', (t) => {
    const rules = promtool(['check', 'rules', RULES])
    if (rules === null) return t.skip(NO_PROMTOOL)
    assert.equal(rules.status, 0, rules.output)
    assert.match(rules.output, /SUCCESS: \d+ rules found/)
    const unit = promtool(['test', 'rules', RULE_TESTS])
    assert.equal(unit?.status, 0, unit?.output)
    const lint = promtool(['check', 'metrics'], metrics)
    assert.equal(lint?.status, 0, lint?.output)
    assert.equal(lint?.output.trim(), '')
  })
})
