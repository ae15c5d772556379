// The queue peer: what a Node team would build instead of svc. BullMQ on Redis: the jobs (one per
// delivery, the event body in the job) are enqueued first ("stored first", like svc's events), then one
// worker process takes them at the same concurrency as svc's window, signs each with node:crypto, POSTs it
// with undici over a keep-alive pool, and lets BullMQ record the completion in Redis.
import { Queue, Worker, type Job } from 'bullmq'
import { Redis } from 'ioredis'
import { Agent, request } from 'undici'
import { serve, type Msg } from '../lib/procs.js'
import { headers, payloads } from '../lib/sign.js'

const QUEUE = 'webhooks'
interface JobData { url: string; body: string; deliveryId: string }

function connect (port: number): Redis {
  return new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: null, enableReadyCheck: true })
}

async function enqueue (msg: Msg): Promise<Record<string, unknown>> {
  const connection = connect(Number(msg.redisPort))
  const queue = new Queue<JobData>(QUEUE, { connection })
  const count = Number(msg.count)
  const bodies = payloads(4096)
  const started = performance.now()
  for (let i = 0; i < count; i += 1000) {
    const jobs = []
    for (let j = i; j < Math.min(count, i + 1000); j++) {
      jobs.push({
        name: 'deliver',
        data: { url: String(msg.url), body: bodies[j % bodies.length]!, deliveryId: `q-${j}` },
        // What a team would set: retries with backoff, like svc's schedule.
        opts: { attempts: 10, backoff: { type: 'exponential', delay: 5000 } },
      })
    }
    await queue.addBulk(jobs)
  }
  const elapsedMs = performance.now() - started
  const waiting = await queue.getWaitingCount()
  await queue.close()
  connection.disconnect()
  return { enqueued: count, waiting, elapsedMs }
}

async function work (msg: Msg): Promise<Record<string, unknown>> {
  const connection = connect(Number(msg.redisPort))
  const secret = String(msg.secret)
  const expected = Number(msg.expected)
  const agent = new Agent({ keepAliveTimeout: 30_000 })
  let completed = 0
  let failed = 0
  const started = performance.now()
  let finish!: () => void
  const done = new Promise<void>((resolve) => { finish = resolve })
  const worker = new Worker<JobData>(QUEUE, async (job: Job<JobData>) => {
    const { url, body, deliveryId } = job.data
    const res = await request(url, { dispatcher: agent, method: 'POST', headers: headers(secret, body, deliveryId), body })
    await res.body.dump()
    if (res.statusCode < 200 || res.statusCode >= 300) throw new Error(`receiver answered ${res.statusCode}`)
  }, { connection, concurrency: Number(msg.concurrency) })
  worker.on('completed', () => { if (++completed + failed >= expected) finish() })
  worker.on('failed', () => { if (completed + ++failed >= expected) finish() })
  const timer = setTimeout(finish, Number(msg.timeoutMs))
  await done
  clearTimeout(timer)
  const elapsedMs = performance.now() - started
  await worker.close(true)
  await agent.close()
  connection.disconnect()
  return { completed, failed, elapsedMs }
}

serve(async (msg) => {
  if (msg.type === 'enqueue') return enqueue(msg)
  if (msg.type === 'work') return work(msg)
  throw new Error(`unknown message ${msg.type}`)
})
