// A real Postfix on loopback, as the relay svc hands its mail to. Debian's postfix package, run as a
// private instance: its own configuration, queue and log under a temporary directory, smtpd on one
// 127.0.0.1 port, every message relayed to `relayhost` (the test's SMTP server playing the remote MX)
// except the domains `transports` route elsewhere (svc's bounce domain → svc's inbound port, so the
// DSNs Postfix writes come back to svc). `access` gives some recipients Postfix's own refusal at RCPT.
//
// Postfix's master runs as root and drops to the `postfix` user: without root, or without the package
// (`.ci/run` installs it), `postfixMissing` says why. The benchmarks run the same instance
// (benchmarks/scenarios/postfix.ts), so it needs no test context: `runPostfix` starts one and hands back
// its `stop`; `startPostfix` ties that to a test's end.
import { execFile } from 'node:child_process'
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { connect } from 'node:net'
import type { TestContext } from 'node:test'
import { freePort } from './ports.js'
import { waitFor } from './wait.js'

const run = promisify(execFile)
const POSTFIX = '/usr/sbin/postfix'

export interface PostfixOptions {
  /** The port of the SMTP server that plays the remote MX: where everything is relayed. */
  relayPort: number
  /** Domain → loopback port: mail for these domains goes there instead. */
  transports?: Record<string, number>
  /** Recipient → Postfix's answer at RCPT ("550 5.1.1 …", "450 4.2.0 …"). */
  access?: Record<string, string>
  /** The smtpd port; default: a free one. */
  port?: number
  /**
   * STARTTLS with this certificate and key (PEM files); `required`: no mail before it (Postfix's
   * `encrypt` level, as relays that take logins have it).
   */
  tls?: { certFile: string; keyFile: string; required: boolean }
  /**
   * Domains Postfix delivers itself, to one Maildir (its `virtual` delivery agent) instead of relaying:
   * every address at them lands in Postfix.maildir().
   */
  maildirDomains?: string[]
}

export interface Postfix {
  port: number
  url: string
  /** Postfix's log so far (its maillog_file). */
  log (): string
  /** The messages delivered to the Maildir of `maildirDomains`, as written there (oldest first). */
  maildir (): Buffer[]
  /**
   * Writes new options (access, transports) and restarts Postfix on them. A restart, not `postfix
   * reload`: a reload only reaches new connections, and a client that keeps its connections open (svc's
   * pool does) would go on talking to smtpd processes that still hold the old settings.
   */
  restart (opts: Partial<PostfixOptions>): Promise<void>
  /** Stops it and removes its directory. */
  stop (): Promise<void>
}

/** Why a Postfix cannot be started here, or null when it can. */
export function postfixMissing (): string | null {
  if (!existsSync(POSTFIX)) return `${POSTFIX} is not installed (Debian package postfix)`
  if (process.getuid?.() !== 0) return 'Postfix\'s master process must start as root'
  return null
}

/** An inline: table (Postfix ≥ 3.0) of key = value pairs, values with spaces in braces. */
function inline (entries: Record<string, string>): string {
  return `inline:{ ${Object.entries(entries).map(([k, v]) => `{${k} = ${v}}`).join(', ')} }`
}

function mainCf (dir: string, opts: PostfixOptions & { mailOwner?: { uid: number; gid: number } }): string {
  const recipientChecks = [opts.access && Object.keys(opts.access).length > 0 ? `check_recipient_access ${inline(opts.access)}` : '', 'permit_mynetworks', 'reject']
  const transports = Object.fromEntries(Object.entries(opts.transports ?? {}).map(([domain, port]) => [domain, `smtp:[127.0.0.1]:${port}`]))
  return [
    'compatibility_level = 3.6',
    `queue_directory = ${join(dir, 'queue')}`,
    `data_directory = ${join(dir, 'data')}`,
    'mail_owner = postfix',
    'setgid_group = postdrop',
    'myhostname = relay.postfix.test',
    'mydomain = postfix.test',
    'myorigin = $myhostname',
    'inet_interfaces = 127.0.0.1',
    'inet_protocols = ipv4',
    'mynetworks = 127.0.0.0/8',
    // Nothing is delivered here: every domain is relayed.
    'mydestination =',
    'local_recipient_maps =',
    'alias_maps =',
    'alias_database =',
    `relayhost = [127.0.0.1]:${opts.relayPort}`,
    ...(opts.maildirDomains !== undefined && opts.maildirDomains.length > 0
      ? [`virtual_mailbox_domains = ${opts.maildirDomains.join(' ')}`, `virtual_mailbox_base = ${join(dir, 'mail')}`,
          // One Maildir (the trailing slash) for every address, owned by the postfix user.
          'virtual_mailbox_maps = static:maildir/', `virtual_uid_maps = static:${opts.mailOwner?.uid ?? 0}`,
          `virtual_gid_maps = static:${opts.mailOwner?.gid ?? 0}`]
      : []),
    Object.keys(transports).length > 0 ? `transport_maps = ${inline(transports)}` : '',
    // Loopback only: no DNS; TLS towards svc only when asked for.
    'smtp_dns_support_level = disabled',
    'smtp_tls_security_level = none',
    ...(opts.tls !== undefined
      ? [`smtpd_tls_cert_file = ${opts.tls.certFile}`, `smtpd_tls_key_file = ${opts.tls.keyFile}`, `smtpd_tls_security_level = ${opts.tls.required ? 'encrypt' : 'may'}`,
          // Says in each Received line whether the hop was encrypted, and with what.
          'smtpd_tls_received_header = yes']
      : ['smtpd_tls_security_level = none']),
    'smtputf8_enable = no',
    'smtpd_relay_restrictions = permit_mynetworks, reject',
    `smtpd_recipient_restrictions = ${recipientChecks.filter(Boolean).join(', ')}`,
    `maillog_file = ${join(dir, 'maillog')}`,
    `maillog_file_prefixes = ${dir}`,
    // A test cannot wait Postfix's default 5 minutes for a deferred message's next try.
    'queue_run_delay = 1s',
    'minimal_backoff_time = 1s',
    'maximal_backoff_time = 2s',
    'biff = no',
    '',
  ].filter((l) => l !== '').join('\n') + '\n'
}

function masterCf (port: number): string {
  // Debian's services, without chroot (the queue directory has no copy of /etc), plus smtpd on one port.
  const services = [
    `127.0.0.1:${port} inet n - n - - smtpd`,
    'pickup unix n - n 60 1 pickup',
    'cleanup unix n - n - 0 cleanup',
    'qmgr unix n - n 300 1 qmgr',
    // smtpd asks it for TLS session keys and entropy: without it, Postfix turns STARTTLS off.
    'tlsmgr unix - - n 1000? 1 tlsmgr',
    'rewrite unix - - n - - trivial-rewrite',
    'virtual unix - n n - - virtual',
    'bounce unix - - n - 0 bounce',
    'defer unix - - n - 0 bounce',
    'trace unix - - n - 0 bounce',
    'verify unix - - n - 1 verify',
    'flush unix n - n 1000? 0 flush',
    'proxymap unix - - n - - proxymap',
    'smtp unix - - n - - smtp',
    'relay unix - - n - - smtp',
    'showq unix n - n - - showq',
    'error unix - - n - - error',
    'retry unix - - n - - error',
    'discard unix - - n - - discard',
    'anvil unix - - n - 1 anvil',
    'scache unix - - n - 1 scache',
    'postlog unix-dgram n - n - 1 postlogd',
  ]
  return services.join('\n') + '\n'
}

async function postfix (dir: string, command: string): Promise<void> {
  try {
    await run(POSTFIX, ['-c', join(dir, 'etc'), command], { timeout: 30_000 })
  } catch (err) {
    const log = existsSync(join(dir, 'maillog')) ? readFileSync(join(dir, 'maillog'), 'utf8').split('\n').slice(-10).join('\n') : ''
    throw new Error(`postfix ${command} failed: ${(err as Error).message}\n${log}`, { cause: err })
  }
}

/** A Postfix instance for a test: stopped, and its directory removed, when the test ends. */
export async function startPostfix (t: Pick<TestContext, 'after'>, opts: PostfixOptions): Promise<Postfix> {
  const postfix = await runPostfix(opts)
  t.after(() => postfix.stop())
  return postfix
}

export async function runPostfix (opts: PostfixOptions): Promise<Postfix> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-postfix-'))
  // mkdtemp makes it 0700: the postfix user must be able to reach its data directory inside.
  chmodSync(dir, 0o755)
  mkdirSync(join(dir, 'etc'))
  mkdirSync(join(dir, 'queue'))
  mkdirSync(join(dir, 'data'))
  // The master drops to `postfix` and keeps its lock and caches here.
  const { uid, gid } = await userIds('postfix')
  chownSync(join(dir, 'data'), uid, gid)
  mkdirSync(join(dir, 'mail'))
  chownSync(join(dir, 'mail'), uid, gid)
  const port = opts.port ?? await freePort()
  let current: PostfixOptions & { mailOwner: { uid: number; gid: number } } = { ...opts, port, mailOwner: { uid, gid } }
  writeFileSync(join(dir, 'etc', 'main.cf'), mainCf(dir, current))
  writeFileSync(join(dir, 'etc', 'master.cf'), masterCf(port))
  const stop = async () => {
    await postfix(dir, 'stop').catch(() => {})
    // The master has let go of its lock and its port once `status` says it is not running.
    await waitFor('Postfix to stop', async () => !(await run(POSTFIX, ['-c', join(dir, 'etc'), 'status']).then(() => true, () => false)), { timeoutMs: 20_000 })
  }
  const start = async () => {
    await postfix(dir, 'start')
    // smtpd answers once the master has bound the port.
    await waitFor('Postfix to listen', () => canConnect(port), { timeoutMs: 20_000 })
  }
  const remove = async () => {
    await stop().catch(() => {})
    rmSync(dir, { recursive: true, force: true })
  }
  try {
    await start()
  } catch (err) {
    await remove()
    throw err
  }
  return {
    port,
    url: `smtp://127.0.0.1:${port}`,
    log: () => existsSync(join(dir, 'maillog')) ? readFileSync(join(dir, 'maillog'), 'utf8') : '',
    maildir: () => {
      const box = join(dir, 'mail', 'maildir')
      // Maildir names start with the delivery time in seconds: sorted, oldest first.
      const files = ['new', 'cur'].flatMap((sub) => existsSync(join(box, sub)) ? readdirSync(join(box, sub)).map((f) => join(box, sub, f)) : [])
      return files.sort((a, b) => (a.slice(a.lastIndexOf('/')) < b.slice(b.lastIndexOf('/')) ? -1 : 1)).map((f) => readFileSync(f))
    },
    async restart (next) {
      current = { ...current, ...next, port }
      writeFileSync(join(dir, 'etc', 'main.cf'), mainCf(dir, current))
      await stop()
      await start()
    },
    stop: remove,
  }
}

async function userIds (name: string): Promise<{ uid: number; gid: number }> {
  const { stdout } = await run('id', [name])
  const uid = /uid=(\d+)/.exec(stdout)
  const gid = /gid=(\d+)/.exec(stdout)
  if (!uid || !gid) throw new Error(`no user ${name}: ${stdout}`)
  return { uid: Number(uid[1]), gid: Number(gid[1]) }
}

async function canConnect (port: number): Promise<boolean> {
  return await new Promise((resolve) => {
    const s = connect(port, '127.0.0.1')
    s.once('connect', () => { s.destroy(); resolve(true) })
    s.once('error', () => resolve(false))
  })
}
