// `node dist/benchmarks/inbound-judge.js` (after `npm run build`): what reading and judging one received
// message costs the main thread, two ways: as it was (mailparser and mailauth on the main thread, every
// signature checked) and as it is (src/mail/inbound/judging.ts: the worker thread, within bounds; the main
// thread copies the message into shared memory and takes the parsed fields back). DNS is a server on
// loopback (test/helpers/dns-server.ts, in a child process so that answering costs this thread nothing)
// holding the sender's key, SPF and DMARC. The figure is the main thread's CPU time per message (Linux:
// /proc/thread-self/schedstat, which counts only time on a core; elsewhere the event loop's busy time,
// which also counts time waiting for a core on a loaded machine), over blocks of messages one after
// another, the median of 5 blocks per way, the two ways alternating; and the wall time per message.
import { fork } from 'node:child_process'
import { generateKeyPairSync, randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { Resolver } from 'node:dns/promises'
import { performance } from 'node:perf_hooks'
import { fileURLToPath } from 'node:url'
import nodemailer from 'nodemailer'
import pino from 'pino'
import { judge, readMessage } from '../src/mail/inbound/examine.js'
import { Judging } from '../src/mail/inbound/judging.js'
import { startDnsServer } from '../test/helpers/dns-server.js'

if (process.argv[2] === 'dns') {
  // The child: the DNS server, its address to the parent, until the parent hangs up.
  const dns = await startDnsServer({ after: () => {} })
  dns.publish('s1._domainkey.customer.example', { TXT: [`v=DKIM1; k=rsa; p=${process.env.BENCH_DKIM_PUBLIC_KEY}`] })
  dns.publish('customer.example', { TXT: ['v=spf1 ip4:127.0.0.1 -all'] })
  dns.publish('_dmarc.customer.example', { TXT: ['v=DMARC1; p=reject'] })
  process.send!(dns.server)
  process.on('disconnect', () => process.exit(0))
  await new Promise(() => {})
}

const { privateKey, publicKey } = generateKeyPairSync('rsa', {
  modulusLength: 2048, publicKeyEncoding: { type: 'spki', format: 'der' }, privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
})
const child = fork(fileURLToPath(import.meta.url), ['dns'], { env: { ...process.env, BENCH_DKIM_PUBLIC_KEY: Buffer.from(publicKey).toString('base64') } })
const dns = { server: await new Promise<string>((resolve) => child.once('message', (m) => resolve(m as string))) }

async function message (attachment: number, signatures = 0): Promise<Buffer> {
  const t = nodemailer.createTransport({
    streamTransport: true, buffer: true, newline: 'windows',
    dkim: { domainName: 'customer.example', keySelector: 's1', privateKey },
  })
  const raw = ((await t.sendMail({
    from: 'Customer <customer@customer.example>', to: 'support@example.com', subject: 'Re: Your ticket 42',
    text: 'Thanks, the invoice is attached.\r\n'.repeat(20), html: '<p>Thanks, the <b>invoice</b> is attached.</p>'.repeat(20),
    attachments: attachment > 0 ? [{ filename: 'invoice.pdf', content: randomBytes(attachment), contentType: 'application/pdf' }] : [],
  })).message as Buffer).toString('latin1')
  if (signatures === 0) return Buffer.from(raw, 'latin1')
  // Signatures after nodemailer's own (the first field), each with the message's body hash and a selector
  // of its own in a zone that says NXDOMAIN at once.
  const bh = /bh=([^;]+);/.exec(raw)![1]!
  let end = raw.indexOf('\r\n') + 2
  while (raw[end] === ' ' || raw[end] === '\t') end = raw.indexOf('\r\n', end) + 2
  const junk = Array.from({ length: signatures }, (_, i) => `DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d=junk${i}.example; s=s${i}; h=from; bh=${bh}; b=AAAA\r\n`).join('')
  return Buffer.from(raw.slice(0, end) + junk + raw.slice(end), 'latin1')
}

const envelope = { ip: '127.0.0.1', helo: 'mail.customer.example', sender: 'customer@customer.example' }
const UNBOUNDED = {
  dkim: Number.MAX_SAFE_INTEGER, arcSets: Number.MAX_SAFE_INTEGER, headerBytes: Number.MAX_SAFE_INTEGER, headerLines: Number.MAX_SAFE_INTEGER,
  fieldBytes: Number.MAX_SAFE_INTEGER, signatureBytes: Number.MAX_SAFE_INTEGER,
}

// As it was: the main thread's resolver (3 s × 2 tries), mailparser, then mailauth on every signature.
const resolver = new Resolver({ timeout: 3000, tries: 2 })
resolver.setServers([dns.server])
const before = async (raw: Buffer) => {
  await readMessage(raw)
  return judge(raw, { ...envelope, mta: 'mx.svc.test', resolver: (name, type) => resolver.resolve(name, type as 'TXT'), bounds: UNBOUNDED })
}
// As it is.
const judging = new Judging({ dnsServers: [dns.server], mta: 'mx.svc.test', logger: pino({ level: 'silent' }), deadlineMs: 60_000 })
const after = async (raw: Buffer) => {
  const examined = await judging.examine(raw, envelope)
  if (examined === 'unreadable') throw new Error('unreadable')
  return examined.authentication
}

/** The main thread's CPU time so far, in ms (Linux), else undefined. */
function threadCpuMs (): number | undefined {
  try {
    return Number(readFileSync('/proc/thread-self/schedstat', 'utf8').split(' ')[0]) / 1e6
  } catch {
    return undefined
  }
}

/** `n` messages one after another: the main thread's time and the wall time per message, in ms. */
async function block (n: number, work: () => Promise<unknown>): Promise<{ main: number; wall: number }> {
  const cpu0 = threadCpuMs()
  const elu0 = performance.eventLoopUtilization()
  const t0 = performance.now()
  for (let i = 0; i < n; i++) await work()
  const cpu1 = threadCpuMs()
  const main = cpu0 !== undefined && cpu1 !== undefined ? cpu1 - cpu0 : performance.eventLoopUtilization(elu0).active
  return { main: main / n, wall: (performance.now() - t0) / n }
}
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]!
const fmt = (xs: Array<{ main: number; wall: number }>) =>
  `${Math.round(median(xs.map((x) => x.main)) * 1000).toLocaleString('en')} µs / ${median(xs.map((x) => x.wall)).toFixed(1)} ms`

console.log(`main thread time per message: ${threadCpuMs() !== undefined ? 'CPU time (schedstat)' : 'event-loop busy time'}`)
console.log('| message | before: main thread / wall | after: main thread / wall | verdicts after |')
console.log('|---|---|---|---|')
const shapes: Array<[string, Buffer, number]> = [
  ['reply, 20 KiB attachment', await message(20 * 1024), 20],
  ['reply, 1 MiB attachment', await message(1024 * 1024), 5],
  ['500 extra DKIM signatures, 20 KiB attachment', await message(20 * 1024, 500), 3],
]
for (const [name, raw, n] of shapes) {
  let verdicts: unknown
  await block(3, () => before(raw))
  await block(3, async () => { verdicts = await after(raw) })
  const a: Array<{ main: number; wall: number }> = []
  const b: Array<{ main: number; wall: number }> = []
  for (let i = 0; i < 5; i++) {
    a.push(await block(n, () => before(raw)))
    b.push(await block(n, () => after(raw)))
  }
  console.log(`| ${name} (${(raw.length / 1024).toFixed(0)} KiB) | ${fmt(a)} | ${fmt(b)} | ${JSON.stringify(verdicts)} |`)
}
await judging.close()
child.disconnect()
