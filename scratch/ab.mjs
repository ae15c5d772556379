// In-process A/B of CPU µs per delivery: the delivery thread's loop (lanes + sender + signing) old vs new,
// alternated, against a bare node:http sink in a child process; and the main thread's packing.
import { readFileSync } from 'node:fs'
import { fork } from 'node:child_process'
import { fileURLToPath } from 'node:url'
const D = '/work/wt/perf/dist/src/delivery'
const OLD = '/work/wt/perf/dist/src/delivery-old'
const mode = process.argv[2] ?? 'thread'
const TCK = 100
const threadCpu = () => { const t = readFileSync('/proc/thread-self/stat', 'utf8'); const f = t.slice(t.lastIndexOf(')') + 2).split(' '); return (Number(f[11]) + Number(f[12])) / TCK }

if (process.argv[2] === 'sink') {
  const http = await import('node:http')
  const srv = http.createServer((req, res) => { req.resume(); req.on('end', () => res.end('ok')) })
  srv.listen(0, '127.0.0.1', () => process.send(srv.address().port))
} else if (mode === 'thread') {
  const child = fork(fileURLToPath(import.meta.url), ['sink'])
  const port = await new Promise((r) => child.once('message', r))
  const body = JSON.stringify({ type: 'email.delivered', id: 'evt_0123456789abcdef0123456789ab', created_at: new Date().toISOString(), data: { email_id: 'em_0123456789abcdef0123456789ab', recipient: 'someone@example.com' } })
  const variants = {}
  for (const [name, dir] of [['old', OLD], ['new', D]]) {
    const { createHttpSender } = await import(`${dir}/http-sender.js`)
    const { Lanes } = await import(`${dir}/lanes.js`)
    const { ResultPacker } = await import(`${D}/wire.js`)
    const sender = createHttpSender({ timeoutMs: 10000, maxResponseBytes: 1024, production: false, allowedCidrs: '', connections: 128 })
    variants[name] = (n) => new Promise((resolve) => {
      let left = n
      const packer = new ResultPacker()
      const onResult = (r) => { packer.push(r); if (packer.size >= 64) packer.take(); if (--left === 0) resolve() }
      const lanes = name === 'old'
        ? new Lanes(64, (t) => sender.deliver(t), onResult)
        : new Lanes(64, (t, done) => sender.dispatch(t, done), onResult)
      const tasks = []
      for (let i = 0; i < n; i++) tasks.push({ deliveryId: `dlv_${name}_${i}`, webhookId: 'wh_1', url: `http://127.0.0.1:${port}/h/0`, event: 'email.delivered', body, secrets: ['whsec_abcdefabcdefabcdefabcdefabcdef'] })
      lanes.add(tasks)
    })
  }
  const N = Number(process.argv[3] ?? 20000)
  await variants.old(3000); await variants.new(3000)
  const res = { old: [], new: [] }
  for (let r = 0; r < Number(process.argv[4] ?? 6); r++) {
    for (const name of r % 2 ? ['new', 'old'] : ['old', 'new']) {
      const c0 = threadCpu(); const t0 = performance.now()
      await variants[name](N)
      const us = (threadCpu() - c0) * 1e6 / N
      res[name].push(us)
      console.log(`${name}: ${us.toFixed(1)} µs/delivery on this thread (${(N / ((performance.now() - t0) / 1000)).toFixed(0)}/s)`)
    }
  }
  const med = (a) => a.slice().sort((x, y) => x - y)[a.length >> 1]
  console.log(`median old ${med(res.old).toFixed(1)} µs, new ${med(res.new).toFixed(1)} µs per delivery`)
  child.kill()
  process.exit(0)
} else {
  const { packTasks, packWork } = await import(`${D}/wire.js`)
  const { serialize } = await import('node:v8')
  const body = 'x'.repeat(300)
  const works = Array.from({ length: 512 }, (_, i) => ({ id: `dlv_${i}`, webhookId: 'wh_1', url: 'http://127.0.0.1/h/0', secrets: ['whsec_x'], event: 'email.delivered', payload: body, attempts: 0, eventAt: 0, lease: 1 }))
  const old = () => { const open = new Set(); const tasks = []; for (const w of works) tasks.push({ deliveryId: w.id, webhookId: w.webhookId, url: w.url, event: w.event, body: w.payload, secrets: w.secrets }); for (const t of tasks) open.add(t.deliveryId); return serialize(packTasks(tasks)) }
  const neu = () => { const open = new Set(); return serialize(packWork(works, open)) }
  const res = { old: [], new: [] }
  for (let r = 0; r < 10; r++) for (const [name, fn] of r % 2 ? [['new', neu], ['old', old]] : [['old', old], ['new', neu]]) {
    const c0 = threadCpu(); for (let k = 0; k < 400; k++) fn(); res[name].push((threadCpu() - c0) * 1e6 / (400 * 512))
  }
  const med = (a) => a.slice().sort((x, y) => x - y)[a.length >> 1]
  console.log(`pack+serialize: old ${res.old.map((x) => x.toFixed(2)).join(' ')}\n                new ${res.new.map((x) => x.toFixed(2)).join(' ')}\nmedian old ${med(res.old).toFixed(2)} new ${med(res.new).toFixed(2)} µs per delivery`)
}
