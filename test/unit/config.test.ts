import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path, { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, test } from 'node:test'
import { loadConfig } from '../../config/index.js'
import { configProblems } from '../helpers/config.js'
import { resolveSecret } from '../../config/secret.js'

describe('loadConfig', () => {
  test('an empty environment gives the documented defaults', () => {
    const c = loadConfig({}, { cores: 4 })
    assert.equal(c.port, 3000)
    assert.equal(c.host, '127.0.0.1')
    assert.equal(c.production, false)
    assert.equal(c.dataDir, './data')
    assert.equal(c.publicUrl, 'http://127.0.0.1:3000', 'what the server prints when it listens')
    assert.equal(c.deliveryThreads, 4)
    assert.equal(c.bodyLimit, 1024 * 1024)
    assert.equal(c.sessionTtlMs, 7 * 24 * 3_600_000)
    assert.equal(c.retentionDays, 30)
    assert.equal(c.secret, undefined)
    assert.deepEqual(c.smtpConnectionLimits, { maxMessages: 500, maxAgeMs: 300_000 })
  })

  test('SMTP_CONNECTION_MAX_MESSAGES and SMTP_CONNECTION_MAX_AGE: 0 means no limit, a value out of range is refused by name', () => {
    assert.deepEqual(loadConfig({ SMTP_CONNECTION_MAX_MESSAGES: '0', SMTP_CONNECTION_MAX_AGE: '0' }).smtpConnectionLimits, { maxMessages: 0, maxAgeMs: 0 })
    assert.deepEqual(loadConfig({ SMTP_CONNECTION_MAX_MESSAGES: '100', SMTP_CONNECTION_MAX_AGE: '60' }).smtpConnectionLimits, { maxMessages: 100, maxAgeMs: 60_000 })
    assert.match(configProblems({ SMTP_CONNECTION_MAX_MESSAGES: '-1' }).join('; '), /SMTP_CONNECTION_MAX_MESSAGES must be a whole number/)
    assert.match(configProblems({ SMTP_CONNECTION_MAX_AGE: '86401' }).join('; '), /SMTP_CONNECTION_MAX_AGE must be a whole number of seconds/)
    // Not rounded down to a number the operator did not write.
    assert.match(configProblems({ SMTP_CONNECTION_MAX_AGE: '1.5' }).join('; '), /SMTP_CONNECTION_MAX_AGE must be a whole number of seconds .*\(got "1\.5"\)/)
    assert.match(configProblems({ SMTP_POOL_SIZE: '2e1' }).join('; '), /SMTP_POOL_SIZE must be a whole number/)
  })

  test('MAIL_LEASE_SECONDS and DELIVERY_LEASE_SECONDS: 30 s each by default, set apart, refused by name out of range', () => {
    const c = loadConfig({})
    assert.equal(c.mail.leaseMs, 30_000)
    assert.equal(c.delivery.leaseMs, 30_000)
    assert.equal(loadConfig({ MAIL_LEASE_SECONDS: '4' }).mail.leaseMs, 4_000)
    assert.equal(loadConfig({ MAIL_LEASE_SECONDS: '4' }).delivery.leaseMs, 30_000)
    assert.match(configProblems({ MAIL_LEASE_SECONDS: '0' }).join('; '), /MAIL_LEASE_SECONDS must be a whole number of seconds from 2 to 3600/)
    assert.match(configProblems({ MAIL_LEASE_SECONDS: '3601' }).join('; '), /MAIL_LEASE_SECONDS must be/)
  })

  test('SCHEDULE_HORIZON_DAYS: 30 days by default, 1 to 365, refused by name out of range', () => {
    assert.equal(loadConfig({}).mail.scheduleHorizonDays, 30)
    assert.equal(loadConfig({ SCHEDULE_HORIZON_DAYS: '90' }).mail.scheduleHorizonDays, 90)
    assert.match(configProblems({ SCHEDULE_HORIZON_DAYS: '0' }).join('; '), /SCHEDULE_HORIZON_DAYS must be a whole number of days from 1 to 365/)
    assert.match(configProblems({ SCHEDULE_HORIZON_DAYS: '366' }).join('; '), /SCHEDULE_HORIZON_DAYS must be/)
  })

  test('NODE_ID defaults to the host name, made safe; a name with other characters is refused', () => {
    assert.equal(loadConfig({}, { hostname: 'mail-1.example.internal' }).nodeId, 'mail-1.example.internal')
    assert.equal(loadConfig({}, { hostname: 'odd host/name' }).nodeId, 'odd-host-name')
    assert.equal(loadConfig({ NODE_ID: 'web-2:a' }, { hostname: 'h' }).nodeId, 'web-2:a')
    const lines = configProblems({ NODE_ID: 'two words' })
    assert.equal(lines.length, 1)
    assert.match(lines[0]!, /^NODE_ID must be a name for this process/)
  })

  test('values are converted and the public URL loses its trailing slash', () => {
    const c = loadConfig({ PORT: '8080', PUBLIC_URL: 'https://mail.example.com/', DELIVERY_THREADS: '3', TRUST_PROXY: '2' })
    assert.equal(c.port, 8080)
    assert.equal(c.publicUrl, 'https://mail.example.com')
    assert.equal(c.deliveryThreads, 3)
    assert.equal(c.trustProxy, 2)
  })

  test('development: PUBLIC_URL follows HOST and PORT, and a browser on localhost or 127.0.0.1 is accepted', () => {
    assert.equal(loadConfig({ PORT: '4000' }).publicUrl, 'http://127.0.0.1:4000')
    assert.equal(loadConfig({ HOST: '0.0.0.0', NODE_ENV: 'development' }).publicUrl, 'http://127.0.0.1:3000')
    assert.equal(loadConfig({ HOST: '::1' }).publicUrl, 'http://[::1]:3000')
    assert.equal(loadConfig({ HOST: '192.168.1.20', NODE_ENV: 'development' }).publicUrl, 'http://192.168.1.20:3000')
    assert.deepEqual(loadConfig({ PORT: '4000' }).allowedOrigins, ['http://127.0.0.1:4000', 'http://localhost:4000', 'http://[::1]:4000'])
    assert.deepEqual(loadConfig({ PUBLIC_URL: 'http://dev.example.test:8080/' }).allowedOrigins,
      ['http://dev.example.test:8080', 'http://localhost:3000', 'http://127.0.0.1:3000', 'http://[::1]:3000'])
    assert.deepEqual(loadConfig({}).warnings, [])
    assert.deepEqual(configProblems({ HOST: 'not a host', NODE_ENV: 'development' }), ['HOST must be an interface address to listen on, like 127.0.0.1 or 0.0.0.0 (got "not a host"), or set PUBLIC_URL'])
    assert.deepEqual(configProblems({ PUBLIC_URL: 'http://a b' }), ['PUBLIC_URL must be an origin like https://mail.example.com (scheme and host, no path) (got "http://a b")'])
  })

  test('production: only PUBLIC_URL is an allowed origin, and a missing or loopback PUBLIC_URL is warned about', () => {
    const secret = { NODE_ENV: 'production', SVC_SECRET: 's'.repeat(40), METRICS_TOKEN: 'm'.repeat(20) }
    const set = loadConfig({ ...secret, PUBLIC_URL: 'https://mail.example.com' })
    assert.deepEqual(set.allowedOrigins, ['https://mail.example.com'])
    assert.deepEqual(set.warnings, [])
    const unset = loadConfig(secret)
    assert.equal(unset.warnings.length, 1)
    assert.match(unset.warnings[0]!, /^PUBLIC_URL is not set: .*http:\/\/127\.0\.0\.1:3000.*set PUBLIC_URL/)
    for (const url of ['http://localhost:3000', 'https://LOCALHOST.', 'http://127.0.0.2:80', 'http://[::1]:3000', 'https://app.localhost']) {
      const c = loadConfig({ ...secret, PUBLIC_URL: url })
      assert.equal(c.warnings.length, 1, url)
      assert.match(c.warnings[0]!, /^PUBLIC_URL is a loopback address/, url)
      assert.deepEqual(c.allowedOrigins, [new URL(url).origin], 'no other origin in production')
    }
  })

  test('development rules only on a loopback HOST: any other HOST without NODE_ENV is refused, naming NODE_ENV', () => {
    for (const host of ['127.0.0.1', '127.0.0.2', '::1', '[::1]', 'localhost']) {
      assert.equal(loadConfig({ HOST: host }).production, false, host)
      assert.deepEqual(loadConfig({ HOST: host }).warnings, [], host)
    }
    for (const host of ['0.0.0.0', '::', '192.168.1.20', 'mail.example.com']) {
      const lines = configProblems({ HOST: host })
      assert.equal(lines.length, 1, host)
      assert.match(lines[0]!, /^NODE_ENV must be set when HOST is not a loopback address/, host)
    }
    // Said out loud, development on an exposed address starts, with a warning.
    const dev = loadConfig({ HOST: '0.0.0.0', NODE_ENV: 'development' })
    assert.equal(dev.production, false)
    assert.match(dev.warnings[0]!, /NODE_ENV=development on HOST 0\.0\.0\.0/)
    assert.equal(loadConfig({ HOST: '0.0.0.0', NODE_ENV: 'production', SVC_SECRET: 's'.repeat(40) }).production, true)
  })

  test('TRUST_PROXY takes a hop count or proxy addresses, never "every hop"', () => {
    assert.equal(loadConfig({}).trustProxy, false)
    assert.equal(loadConfig({ TRUST_PROXY: '1' }).trustProxy, 1)
    assert.deepEqual(loadConfig({ TRUST_PROXY: '10.0.0.5, 10.1.0.0/16,::1' }).trustProxy, ['10.0.0.5', '10.1.0.0/16', '::1'])
    for (const bad of ['true', '0', '10.0.0.300', 'all']) {
      const lines = configProblems({ TRUST_PROXY: bad })
      assert.equal(lines.length, 1, bad)
      assert.match(lines[0]!, /^TRUST_PROXY must be false, the number of reverse proxies/, bad)
    }
  })

  test('/metrics: open in development, behind METRICS_TOKEN when set, and in production not served without it (with a warning)', () => {
    const prod = { NODE_ENV: 'production', SVC_SECRET: 's'.repeat(40), PUBLIC_URL: 'https://mail.example.com' }
    assert.deepEqual([loadConfig({}).metricsServed, loadConfig({}).metricsToken], [true, undefined])
    const off = loadConfig(prod)
    assert.equal(off.metricsServed, false)
    assert.equal(off.warnings.length, 1)
    assert.match(off.warnings[0]!, /^METRICS_TOKEN is not set: \/metrics is not served \(404\) in production; set METRICS_TOKEN/)
    // An empty value is unset, as in a .env line `METRICS_TOKEN=`.
    assert.equal(loadConfig({ ...prod, METRICS_TOKEN: '' }).metricsServed, false)
    const on = loadConfig({ ...prod, METRICS_TOKEN: 'metrics-token-0123456789' })
    assert.deepEqual([on.metricsServed, on.metricsToken, on.warnings], [true, 'metrics-token-0123456789', []])
    const [short] = configProblems({ ...prod, METRICS_TOKEN: 'short' })
    assert.match(short!, /^METRICS_TOKEN must be a bearer token of at least 16 characters$/)
  })

  test('signup and quotas: closed and on in production, open and off elsewhere, each overridable', () => {
    const prod = { NODE_ENV: 'production', SVC_SECRET: 's'.repeat(40) }
    assert.equal(loadConfig(prod).signupOpen, false)
    assert.equal(loadConfig({ ...prod, SIGNUP: 'open' }).signupOpen, true)
    assert.equal(loadConfig({}).signupOpen, true)
    assert.equal(loadConfig({ SIGNUP: 'closed' }).signupOpen, false)
    assert.deepEqual(loadConfig(prod).quotas, { free: { day: 100, month: 3000 }, pro: { day: null, month: 50_000 } })
    assert.equal(loadConfig({ ...prod, QUOTAS: 'off' }).quotas, null)
    assert.equal(loadConfig({}).quotas, null)
    assert.deepEqual(loadConfig({ QUOTAS: 'on', QUOTA_FREE_PER_DAY: '5', QUOTA_FREE_PER_MONTH: '0' }).quotas?.free, { day: 5, month: null })
  })

  test('each bad variable gets one line naming it and what it expects', () => {
    const lines = configProblems({ PORT: 'http', NODE_ENV: 'staging', RETENTION_DAYS: '0', PUBLIC_URL: 'mail.example.com' })
    assert.equal(lines.length, 4)
    assert.ok(lines.some((l) => l.startsWith('PORT must be a TCP port number from 0 to 65535') && l.includes('"http"')))
    assert.ok(lines.some((l) => l.startsWith('NODE_ENV must be one of development, production, test')))
    assert.ok(lines.some((l) => l.startsWith('RETENTION_DAYS must be')))
    assert.ok(lines.some((l) => l.startsWith('PUBLIC_URL must be an origin')))
  })

  test('production needs SVC_SECRET, and a short secret is refused without being repeated', () => {
    assert.deepEqual(configProblems({ NODE_ENV: 'production' }), ['SVC_SECRET must be set in production (a random string of at least 32 characters)'])
    const [line] = configProblems({ SVC_SECRET: 'hunter2' })
    assert.ok(line?.startsWith('SVC_SECRET must be'))
    assert.equal(line?.includes('hunter2'), false)
  })

  test('a connection string with a password is never echoed', () => {
    const [line] = configProblems({ MONGODB_URI: 'postgres://admin:s3cret@db' })
    assert.ok(line?.startsWith('MONGODB_URI must be'))
    assert.equal(line?.includes('s3cret'), false)
  })

  test('MONGODB_WRITE_CONCERN: majority by default, or a number of members; anything else is refused', () => {
    assert.equal(loadConfig({}).mongodbWriteConcern, 'majority')
    assert.equal(loadConfig({ MONGODB_WRITE_CONCERN: '2' }).mongodbWriteConcern, 2)
    for (const bad of ['0', 'all', '1; w=0']) {
      assert.match(configProblems({ MONGODB_WRITE_CONCERN: bad })[0] ?? '', /^MONGODB_WRITE_CONCERN must be majority, or a number/)
    }
  })
})

describe('the shipped files: .env.example filled in as the README says', () => {
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
  const read = (file: string) => readFileSync(path.join(root, file), 'utf8')

  /** A .env file as compose reads it: KEY=VALUE lines; blank lines and # comments skipped. */
  function dotenv (text: string): Record<string, string> {
    const out: Record<string, string> = {}
    for (const line of text.split('\n')) {
      if (/^\s*(#|$)/.test(line)) continue
      const m = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(line)
      assert.ok(m, `a KEY=VALUE line: ${line}`)
      out[m[1]!] = m[2]!.trim()
    }
    return out
  }

  /** What README's step says: `cp .env.example .env`, then set the secrets left empty in it. */
  function filledIn (): Record<string, string> {
    const env = dotenv(read('.env.example'))
    for (const required of ['SVC_SECRET', 'METRICS_TOKEN', 'MONGO_USERNAME', 'MONGO_PASSWORD']) assert.ok(required in env, `.env.example names ${required}`)
    return {
      ...env,
      SVC_SECRET: randomBytes(32).toString('base64'), // openssl rand -base64 32
      METRICS_TOKEN: randomBytes(24).toString('hex'), // openssl rand -hex 24
      MONGO_PASSWORD: randomBytes(24).toString('hex'),
    }
  }

  /** Compose's interpolation: $$, ${X}, ${X:-default}, ${X-default}, ${X:?error}, ${X?error}. */
  function interpolate (value: string, env: Record<string, string>): string {
    return value.replace(/\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?)([-?])([^}]*))?\}/g, (whole, name?: string, colon?: string, op?: string, arg?: string) => {
      if (whole === '$$') return '$'
      const v = env[name!]
      const missing = v === undefined || (colon === ':' && v === '')
      if (op === '?' && missing) throw new Error(`compose refuses: ${name} (${arg})`)
      if (op === '-' && missing) return arg!
      return v ?? ''
    })
  }

  /**
   * A block mapping of plain `KEY: value` lines in compose.yaml: the lines indented one level under the
   * first line matching `header` at or after line `from` (a merge `<<: *anchor` pulls in the anchored block).
   */
  function composeMapping (text: string, header: RegExp, from = 0): Record<string, string> {
    const lines = text.split('\n')
    const at = lines.findIndex((l, i) => i >= from && header.test(l))
    assert.ok(at >= 0, `compose.yaml has ${header}`)
    const indent = /^ */.exec(lines[at]!)![0].length
    const out: Record<string, string> = {}
    let child: number | undefined
    for (const line of lines.slice(at + 1)) {
      if (/^\s*(#|$)/.test(line)) continue
      const own = /^ */.exec(line)![0].length
      if (own <= indent) break
      child ??= own
      if (own !== child) continue
      const m = /^ *([^:]+): *(.*)$/.exec(line)!
      if (m[1] === '<<') Object.assign(out, composeMapping(text, new RegExp(`&${m[2]!.slice(1)}$`)))
      else out[m[1]!] = m[2]!.replace(/^"(.*)"$/, '$1')
    }
    return out
  }

  /** The `environment` of one service of compose.yaml, as written (before interpolation). */
  function serviceEnvironment (compose: string, service: string): Record<string, string> {
    const at = compose.split('\n').indexOf(`  ${service}:`)
    assert.ok(at >= 0, `compose.yaml has the service ${service}`)
    return composeMapping(compose, /^ {4}environment:$/, at)
  }

  /** The ENV the image sets (Dockerfile). */
  function imageEnv (): Record<string, string> {
    const block = /^ENV ((?:.*\\\n)*.*)$/m.exec(read('Dockerfile'))
    assert.ok(block, 'the Dockerfile sets ENV')
    return Object.fromEntries([...block[1]!.matchAll(/([A-Z_]+)=(\S+)/g)].map((m) => [m[1]!, m[2]!]))
  }

  test('compose gives each svc service an environment that passes config: production, TRUST_PROXY=1, MongoDB with credentials, /metrics behind the token', () => {
    const env = filledIn()
    const compose = read('compose.yaml')
    for (const service of ['api', 'worker']) {
      const svcEnv = Object.fromEntries(Object.entries(serviceEnvironment(compose, service)).map(([k, v]) => [k, interpolate(v, env)]))
      const config = loadConfig({ ...imageEnv(), ...svcEnv }, { hostname: `${service}-1` })
      assert.equal(config.production, true, service)
      assert.equal(config.trustProxy, 1, `${service}: one hop, the TLS proxy on this host`)
      assert.equal(config.metricsServed, true)
      assert.equal(config.metricsToken, env.METRICS_TOKEN)
      const uri = new URL(config.mongodbUri!)
      assert.equal(uri.username, env.MONGO_USERNAME)
      assert.equal(uri.password, env.MONGO_PASSWORD)
      assert.equal(uri.searchParams.get('authSource'), 'admin')
      assert.equal(uri.searchParams.get('replicaSet'), 'rs0')
      assert.equal(config.publicUrl, 'https://mail.example.com')
    }
    // The mongo service's root user is the one svc connects as.
    const mongo = serviceEnvironment(compose, 'mongo')
    assert.equal(interpolate(mongo.MONGO_INITDB_ROOT_USERNAME!, env), env.MONGO_USERNAME)
    assert.equal(interpolate(mongo.MONGO_INITDB_ROOT_PASSWORD!, env), env.MONGO_PASSWORD)
  })

  test('compose refuses to start without SVC_SECRET, METRICS_TOKEN, MONGO_USERNAME or MONGO_PASSWORD', () => {
    const compose = read('compose.yaml')
    const svcEnv = composeMapping(compose, /&svc-environment$/)
    const mongo = serviceEnvironment(compose, 'mongo')
    for (const name of ['SVC_SECRET', 'METRICS_TOKEN', 'MONGO_USERNAME', 'MONGO_PASSWORD']) {
      const env = { ...filledIn(), [name]: '' } // left as .env.example has it
      assert.throws(() => { for (const v of [...Object.values(svcEnv), ...Object.values(mongo)]) interpolate(v, env) }, new RegExp(`compose refuses: ${name} `))
    }
  })

  test('.env.example\'s own values, as the environment of svc in the image, pass config', () => {
    const config = loadConfig({ ...imageEnv(), ...filledIn() })
    assert.equal(config.production, true)
    assert.equal(config.trustProxy, 1)
    assert.equal(config.metricsServed, true)
    assert.equal(config.smtpUrl, undefined, 'SMTP_URL= is unset: the sandbox')
    assert.equal(config.mailFrom, 'Example <no-reply@example.com>')
  })
})

describe('resolveSecret', () => {
  test('development generates a secret once into DATA_DIR, readable by the owner only, and reuses it', () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-secret-'))
    try {
      const config = loadConfig({ DATA_DIR: dir })
      const first = resolveSecret(config)
      assert.ok(first.length >= 32)
      assert.equal(resolveSecret(config), first)
      assert.equal(readFileSync(join(dir, 'secret'), 'utf8').trim(), first)
      assert.equal(statSync(join(dir, 'secret')).mode & 0o077, 0)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('SVC_SECRET wins over any file', () => {
    const config = loadConfig({ SVC_SECRET: 'x'.repeat(40), DATA_DIR: '/nonexistent/never-created' })
    assert.equal(resolveSecret(config), 'x'.repeat(40))
  })
})
