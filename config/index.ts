// The environment svc reads, as one TypeBox schema: defaults, types and what each variable expects live
// here and nowhere else. Only the entry points (src/server.ts, src/cli.ts) call loadConfig(process.env);
// everything else receives the Config object it is given.
import { Type, type Static, type TSchema, type TSchemaOptions } from 'typebox'
import { Value } from 'typebox/value'
import { Resolver } from 'node:dns/promises'
import { createPrivateKey, X509Certificate } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { createSecureContext } from 'node:tls'
import ipaddr from 'ipaddr.js'
import type { Quotas } from '../src/domain/quotas.js'
import { DEFAULT_ATTACHMENTS_MAX_BYTES, MAX_ATTACHMENTS, MAX_ATTACHMENTS_MAX_BYTES } from '../src/domain/attachments.js'

export type { Quotas }

const port = (fallback: number, expects: string) =>
  Type.Integer({ minimum: 0, maximum: 65535, default: fallback, description: expects })

/** Connections to the SMTP relay at once unless SMTP_POOL_SIZE says otherwise: Postfix's default concurrency per destination. */
export const DEFAULT_SMTP_POOL_SIZE = 20

const positive = (fallback: number, expects: string, max = Number.MAX_SAFE_INTEGER) =>
  Type.Integer({ minimum: 1, maximum: max, default: fallback, description: expects })

export const EnvSchema = Type.Object({
  PORT: port(3000, 'a TCP port number from 0 to 65535'),
  HOST: Type.String({ minLength: 1, default: '127.0.0.1', description: 'an interface address to listen on, like 127.0.0.1 or 0.0.0.0' }),
  // No default here: unset means development on a loopback HOST, and is refused on any other (loadConfig).
  NODE_ENV: Type.Optional(Type.Union([Type.Literal('development'), Type.Literal('production'), Type.Literal('test')], {
    description: 'one of development, production, test',
  })),
  SVC_SECRET: Type.Optional(Type.String({ minLength: 32, description: 'a random string of at least 32 characters' })),
  DATA_DIR: Type.String({ minLength: 1, default: './data', description: 'a directory for the embedded store' }),
  MONGODB_URI: Type.Optional(Type.String({ pattern: '^mongodb(\\+srv)?://', description: 'a mongodb:// or mongodb+srv:// connection string' })),
  MONGODB_WRITE_CONCERN: Type.String({
    default: 'majority', pattern: '^(majority|[1-9][0-9]?)$', description: 'majority, or a number of replica set members from 1 to 99',
  }),
  SMTP_URL: Type.Optional(Type.String({ pattern: '^smtps?://', description: 'an smtp:// or smtps:// URL' })),
  // Connections to the relay at once (each carries up to two pipelined transactions). 20, as Postfix's
  // default concurrency per destination: each transaction waits a round trip through two busy event loops.
  SMTP_POOL_SIZE: positive(DEFAULT_SMTP_POOL_SIZE, 'a whole number of connections from 1 to 200', 200),
  // A connection is retired after this many messages (0: never): under Exim's default of 1,000 a connection,
  // past which it refuses the next with 421.
  SMTP_CONNECTION_MAX_MESSAGES: Type.Integer({
    minimum: 0, maximum: 1_000_000, default: 500, description: 'a whole number of messages per connection from 0 (no limit) to 1000000',
  }),
  // A connection takes new messages for this many seconds at most (0: no limit), as Postfix's own client
  // reuses one for 300 s: a relay behind a name with many addresses gets its load spread again.
  SMTP_CONNECTION_MAX_AGE: Type.Integer({
    minimum: 0, maximum: 86_400, default: 300, description: 'a whole number of seconds from 0 (no limit) to 86400',
  }),
  // No CR or LF: the value becomes the From header of every email that does not name its own sender.
  MAIL_FROM: Type.String({
    default: 'svc <no-reply@localhost>', pattern: '^[^\\u0000-\\u001F\\u007F]*@[^\\u0000-\\u001F\\u007F]*$',
    description: 'a sender address like "Example <no-reply@example.com>" or no-reply@example.com',
  }),
  // No default here: unset means 200 in development and test, 0 in production.
  SANDBOX_KEEP: Type.Optional(Type.Integer({
    minimum: 0, maximum: 100_000,
    description: 'how many emails the sandbox transport keeps as files in DATA_DIR/sandbox, a whole number from 0 (none) to 100000',
  })),
  PUBLIC_URL: Type.Optional(Type.String({ pattern: '^https?://[^/]+/?$', description: 'an origin like https://mail.example.com (scheme and host, no path)' })),
  // No default here: unset means this machine's host name, known only at start.
  NODE_ID: Type.Optional(Type.String({
    pattern: '^[A-Za-z0-9._:-]{1,100}$',
    description: 'a name for this process, unique among the processes sharing one store (up to 100 letters, digits, ".", "_", ":" or "-")',
  })),
  // No default here: unset means one thread per core, known only at start.
  DELIVERY_THREADS: Type.Optional(Type.Integer({ minimum: 1, maximum: 64, description: 'a whole number of worker threads from 1 to 64' })),
  WEBHOOK_ALLOWED_CIDRS: Type.String({ default: '', description: 'a comma-separated list of CIDR ranges, like 10.1.0.0/16,fd00:1::/64' }),
  RETENTION_DAYS: positive(30, 'a whole number of days, at least 1', 3650),
  DELIVERY_TIMEOUT_MS: positive(10_000, 'a whole number of milliseconds from 1 to 60000', 60_000), // 10 s
  DELIVERY_RETRY_SCHEDULE: Type.String({
    default: '5s,30s,2m,10m,30m,1h,3h,6h,12h,24h',
    pattern: '^\\s*\\d+(ms|s|m|h|d)\\s*(,\\s*\\d+(ms|s|m|h|d)\\s*)*$',
    description: 'a comma-separated list of delays like 5s,30s,2m,1h (units ms, s, m, h, d)',
  }),
  DELIVERY_LEASE_SECONDS: positive(30, 'a whole number of seconds from 2 to 3600', 3600),
  MAIL_LEASE_SECONDS: positive(30, 'a whole number of seconds from 2 to 3600', 3600),
  // How far ahead a send may be scheduled (src/domain/schedule.ts).
  SCHEDULE_HORIZON_DAYS: positive(30, 'a whole number of days from 1 to 365', 365),
  DELIVERY_WINDOW: positive(64, 'a whole number of concurrent requests per webhook from 1 to 1000', 1000),
  // The adaptive window per webhook (src/delivery/window.ts) moves between DELIVERY_WINDOW_MIN and
  // DELIVERY_WINDOW, starting at DELIVERY_WINDOW_INITIAL; each is clamped into that range.
  DELIVERY_WINDOW_MIN: positive(1, 'a whole number of concurrent requests per webhook from 1 to 1000', 1000),
  DELIVERY_WINDOW_INITIAL: positive(8, 'a whole number of concurrent requests per webhook from 1 to 1000', 1000),
  DELIVERY_DOWN_AFTER_SECONDS: positive(5, 'a whole number of seconds from 1 to 3600', 3600),
  WEBHOOK_AUTO_DISABLE_HOURS: positive(120, 'a whole number of hours, at least 1'), // 5 days
  LOG_LEVEL: Type.Union([
    Type.Literal('fatal'), Type.Literal('error'), Type.Literal('warn'), Type.Literal('info'),
    Type.Literal('debug'), Type.Literal('trace'), Type.Literal('silent'),
  ], {
    default: 'info', description: 'one of fatal, error, warn, info, debug, trace, silent',
  }),
  BODY_LIMIT_BYTES: positive(1024 * 1024, 'a size in bytes, at least 1'), // 1 MiB
  // The send routes only; unset: room for ATTACHMENTS_MAX_BYTES in base64 and a full html and text (15 MiB by default).
  HTTP_REQUEST_TIMEOUT_SECONDS: positive(120, 'a whole number of seconds from 1 to 3600', 3600),
  SEND_BODY_LIMIT_BYTES: Type.Optional(Type.Integer({ minimum: 1024, description: 'a size in bytes, at least 1024' })),
  // Send bodies over 1 MiB held at once, from their first byte to their answer (src/http/send-budget.ts).
  SEND_BYTES_IN_FLIGHT: positive(32 * 1024 * 1024, 'a size in bytes, at least 1'),
  ATTACHMENTS_MAX_BYTES: positive(DEFAULT_ATTACHMENTS_MAX_BYTES, `a size in bytes from 1 to ${MAX_ATTACHMENTS_MAX_BYTES}`, MAX_ATTACHMENTS_MAX_BYTES),
  ATTACHMENT_RETENTION_HOURS: positive(24, 'a whole number of hours from 1 to 8760', 8760),
  SESSION_TTL_HOURS: positive(7 * 24, 'a whole number of hours, at least 1'), // 7 days, sliding
  SESSION_MAX_HOURS: positive(30 * 24, 'a whole number of hours, at least 1'), // 30 days, absolute
  // Who may sign up (README "Security"): unset means closed in production (the first account only), open elsewhere.
  SIGNUP: Type.Optional(Type.Union([Type.Literal('open'), Type.Literal('closed')], {
    description: 'open (anyone may sign up) or closed (only the first account; further ones with the CLI)',
  })),
  // Sending quotas, in recipients accepted per UTC day and month; unset QUOTAS means on in production, off elsewhere.
  QUOTAS: Type.Optional(Type.Union([Type.Literal('on'), Type.Literal('off')], { description: 'on or off' })),
  QUOTA_FREE_PER_DAY: Type.Integer({ minimum: 0, default: 100, description: 'a whole number of recipients, 0 for no daily limit' }),
  QUOTA_FREE_PER_MONTH: Type.Integer({ minimum: 0, default: 3000, description: 'a whole number of recipients, 0 for no monthly limit' }),
  QUOTA_PRO_PER_DAY: Type.Integer({ minimum: 0, default: 0, description: 'a whole number of recipients, 0 for no daily limit' }),
  QUOTA_PRO_PER_MONTH: Type.Integer({ minimum: 0, default: 50_000, description: 'a whole number of recipients, 0 for no monthly limit' }),
  RATE_LIMIT_AUTH_PER_MINUTE: positive(20, 'a whole number of requests, at least 1'),
  // The account-wide ceiling on login attempts (all addresses together), far above what one address is
  // allowed before its delays (RATE_LIMIT_LOGIN_FAILURES): it stops guessing spread over many addresses.
  RATE_LIMIT_LOGIN_PER_EMAIL: positive(200, 'a whole number of attempts per 15 minutes, at least 1'),
  RATE_LIMIT_LOGIN_FAILURES: positive(5, 'a whole number of failed logins from one address before it must wait, at least 1'),
  RATE_LIMIT_COSTLY_PER_MINUTE: Type.Optional(Type.Integer({ minimum: 1, description: 'a whole number of requests, at least 1' })),
  RATE_LIMIT_API_PER_SECOND: positive(1000, 'a whole number of requests, at least 1'),
  // Per account, on every route behind a session or a managing key; unset: 600 and 120 a minute in
  // production, ten times that elsewhere (test suites and scripts run fast on loopback).
  RATE_LIMIT_READS_PER_MINUTE: Type.Optional(Type.Integer({ minimum: 1, description: 'a whole number of requests, at least 1' })),
  RATE_LIMIT_WRITES_PER_MINUTE: Type.Optional(Type.Integer({ minimum: 1, description: 'a whole number of requests, at least 1' })),
  METRICS_TOKEN: Type.Optional(Type.String({ minLength: 16, description: 'a bearer token of at least 16 characters' })),
  // Never "every hop": a client can write any X-Forwarded-For it likes, so only the hops that the operator's
  // own proxies appended are believed.
  TRUST_PROXY: Type.String({
    default: 'false',
    pattern: '^(false|[1-9][0-9]?|[0-9A-Fa-f.:/]+( *, *[0-9A-Fa-f.:/]+)*)$',
    description: 'false, the number of reverse proxies in front of svc (1 to 99), or a comma-separated list of their addresses or CIDR ranges, like 10.0.0.5,10.1.0.0/16',
  }),
  // Several nodes (README "Running several nodes"): what this process runs, and where rate limits count.
  SVC_ROLES: Type.String({
    default: 'api,mailer,delivery', pattern: '^ *(api|mailer|delivery) *(, *(api|mailer|delivery) *)*$',
    description: 'a comma-separated list of the roles this process runs, from api, mailer, delivery (default all three)',
  }),
  RATE_LIMIT_STORE: Type.Union([Type.Literal('auto'), Type.Literal('memory'), Type.Literal('store')], {
    default: 'auto', description: 'one of memory (counters in this process), store (counters in the store, shared by every node), auto (store on MongoDB, memory on SQLite)',
  }),
  // Sender domains, DKIM, bounces and complaints (README "Sending from your domain", "Bounces and complaints").
  DNS_SERVERS: Type.Optional(Type.String({
    pattern: '^ *[0-9A-Fa-f.:\\[\\]]+ *(, *[0-9A-Fa-f.:\\[\\]]+ *)*$',
    description: 'a comma-separated list of DNS servers as ip or ip:port ([v6]:port), like 127.0.0.1:5353,9.9.9.9',
  })),
  REQUIRE_VERIFIED_DOMAIN: Type.Optional(Type.Union([Type.Literal('true'), Type.Literal('false')], {
    description: 'true to refuse sends whose from is not on a verified domain of the account, else false (default: true in production)',
  })),
  BOUNCE_DOMAIN: Type.Optional(Type.String({
    pattern: '^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\\.)+[a-z]([a-z0-9-]{0,61}[a-z0-9])?$',
    description: 'a lower-case domain name that receives returning mail, like bounces.mail.example.com',
  })),
  INBOUND_SMTP_PORT: Type.Optional(Type.Integer({ minimum: 0, maximum: 65535, description: 'a TCP port number from 0 to 65535 for returning mail (unset: no listener)' })),
  INBOUND_SMTP_HOST: Type.String({ minLength: 1, default: '0.0.0.0', description: 'an interface address for the returning-mail listener, like 0.0.0.0' }),
  INBOUND_MX_HOST: Type.Optional(Type.String({
    pattern: '^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$',
    description: 'the lower-case host name that MX records for returning mail point at (default: the host of PUBLIC_URL)',
  })),
  // Receiving mail (README "Receiving mail"): the largest message taken for a domain with receiving on.
  INBOUND_MAX_BYTES: Type.Integer({
    minimum: 1024, maximum: 50 * 1024 * 1024, default: 10 * 1024 * 1024, description: 'a whole number of bytes from 1024 to 52428800 (50 MiB)',
  }),
  // From the end of DATA to a received message's verdicts; past it they are temperror (README "Receiving mail").
  INBOUND_JUDGE_DEADLINE_MS: Type.Integer({
    minimum: 1000, maximum: 120_000, default: 10_000, description: 'a whole number of milliseconds from 1000 to 120000',
  }),
  // The inbound listener's certificate for STARTTLS (README "Bounces and complaints"): both or neither.
  INBOUND_TLS_CERT: Type.Optional(Type.String({ minLength: 1, description: 'the path of a PEM certificate file (the chain, leaf first) for the inbound listener\'s STARTTLS' })),
  INBOUND_TLS_KEY: Type.Optional(Type.String({ minLength: 1, description: 'the path of the PEM private key file of INBOUND_TLS_CERT' })),
  // Connections counted per sender: an IPv4 address's first N bits (IPv6: always its /64).
  INBOUND_IPV4_PREFIX: Type.Integer({ minimum: 16, maximum: 32, default: 32, description: 'a prefix length from 16 to 32' }),
  COMPLAINTS_ADDRESS: Type.Optional(Type.String({
    pattern: '^[a-z0-9._+-]{1,64}@[a-z0-9.-]{1,253}$', description: 'a lower-case address that feedback (ARF) reports are sent to, like complaints@bounces.example.com',
  })),
  SPF_INCLUDE: Type.Optional(Type.String({
    pattern: '^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$', description: 'a domain whose SPF record lists the relay\'s addresses, like amazonses.com (default: the relay\'s host)',
  })),
})
export type Env = Static<typeof EnvSchema>

// Variables whose value must never be printed, even when it is the wrong one.
const SECRET_VARIABLES = new Set(['SVC_SECRET', 'METRICS_TOKEN', 'MONGODB_URI', 'SMTP_URL'])

export interface Config {
  port: number
  host: string
  env: 'development' | 'production' | 'test'
  production: boolean
  /** Undefined until resolveSecret() has read or generated it (development only). */
  secret: string | undefined
  dataDir: string
  mongodbUri: string | undefined
  /** MongoDB's write concern `w` (writes are always journaled): 'majority' or a number of members. */
  mongodbWriteConcern: 'majority' | number
  smtpUrl: string | undefined
  /** SMTP_POOL_SIZE: connections to the relay at once; the mailer keeps eight emails in flight per connection (at least 32). */
  smtpPoolSize: number
  /** SMTP_CONNECTION_MAX_MESSAGES and SMTP_CONNECTION_MAX_AGE (in ms here): when a connection is retired; 0: never. */
  smtpConnectionLimits: { maxMessages: number; maxAgeMs: number }
  /** The From of emails that do not name their own sender. */
  mailFrom: string
  /** Without SMTP_URL: how many emails are written to DATA_DIR/sandbox (.eml and .html) for a look; 0: none. */
  sandboxKeep: number
  publicUrl: string
  /**
   * The browser origins whose cookie requests are accepted (the Origin check): PUBLIC_URL's, and in
   * development also http://localhost:PORT, http://127.0.0.1:PORT and http://[::1]:PORT, so a browser
   * on either name of this machine works.
   */
  allowedOrigins: string[]
  /** Things worth telling the operator at start (server.ts logs them): a setting that works but will surprise. */
  warnings: string[]
  /**
   * This process's name in the store's leases (the mail queue's, and the prefix of the delivery
   * engine's). Leases under it are taken back at start, so two live processes must not share it.
   */
  nodeId: string
  deliveryThreads: number
  webhookAllowedCidrs: string
  retentionDays: number
  delivery: {
    timeoutMs: number
    /** Delay before each retry, in milliseconds; after the last one the delivery is failed. */
    retrySchedule: number[]
    /** Requests in flight at once per webhook: the adaptive window's upper bound. */
    window: number
    /** The adaptive window's lower bound and starting point. */
    windowMin: number
    windowInitial: number
    /** How long without a 2xx makes an endpoint down (its 429/503 then count as failures, its breaker may open). */
    downAfterMs: number
    /** How long a node's claim on a delivery lasts unless renewed; a dead node's work waits this long. */
    leaseMs: number
    /** A webhook failing without one success for this long is auto_disabled. */
    autoDisableMs: number
  }
  logLevel: string
  bodyLimit: number
  /** HTTP_REQUEST_TIMEOUT_SECONDS: a request, body included, must have arrived whole within this long. */
  requestTimeoutMs: number
  /** POST /api/send and /api/send/batch: SEND_BODY_LIMIT_BYTES, or room for the attachments' allowance in base64. */
  sendBodyLimit: number
  /**
   * Send bodies over 1 MiB held at once (SEND_BYTES_IN_FLIGHT), and how long one waits for room before a
   * 503 with Retry-After.
   */
  sendBudget: { bytes: number; waitMs: number }
  /** An email's attachments: their decoded bytes and count at most, and how long their bytes stay after its last attempt. */
  attachments: { maxBytes: number; maxCount: number; retentionMs: number }
  /** Sliding: a session unused this long ends. */
  sessionTtlMs: number
  /** Absolute: a session ends this long after login however much it is used. */
  sessionMaxMs: number
  /** SIGNUP: may anyone create an account over HTTP, or only the first one (then the CLI)? */
  signupOpen: boolean
  /** Recipients accepted per UTC day and month for each plan (null: no limit); null: quotas off. */
  quotas: Quotas | null
  rateLimits: {
    authPerMinute: number
    /** Login attempts per email in 15 minutes, from every address together. */
    loginPerEmail: number
    /** Failed logins per email and client address before that address waits (growing delays). */
    loginFailures: number
    apiPerSecond: number
    /** Per account, on authenticated routes: GET/HEAD, and the rest. */
    readsPerMinute: number
    writesPerMinute: number
    /** Per account and route, on routes that cost svc (or someone else) much: webhook test, domain and key creation. */
    costlyPerMinute: number
  }
  metricsToken: string | undefined
  /** Whether /metrics is served: not in production without METRICS_TOKEN (it answers 404 there), so it is never public by default. */
  metricsServed: boolean
  /** Fastify's trustProxy: false, how many proxy hops to believe, or the proxies' addresses. Never true. */
  trustProxy: false | number | string[]
  /** What this process runs (SVC_ROLES); a process without `api` serves only /healthz, /readyz and /metrics. */
  roles: { api: boolean; mailer: boolean; delivery: boolean }
  /** Where rate-limit counters live: this process's memory, or the store (shared by every node). */
  rateLimitStore: 'memory' | 'store'
  /** DNS_SERVERS as `ip` or `ip:port` entries; empty: the system's resolvers. */
  dnsServers: string[]
  mail: {
    requireVerifiedDomain: boolean
    /** BOUNCE_DOMAIN: where bounces.<domain> CNAMEs point, and the Return-Path of unverified senders. */
    bounceDomain: string | undefined
    /** The listener for returning mail; undefined port: off. `tls`: STARTTLS offered with these files; `ipv4Prefix`: INBOUND_IPV4_PREFIX. */
    inbound: { port: number | undefined; host: string; ipv4Prefix: number; tls: { certFile: string; keyFile: string } | undefined }
    /** The host MX records of bounce domains point at. */
    mxHost: string
    complaintsAddress: string | undefined
    spfInclude: string | undefined
    /** INBOUND_MAX_BYTES: the largest message received for a domain with receiving on. */
    receivingMaxBytes: number
    /** INBOUND_JUDGE_DEADLINE_MS: how long reading and judging a received message may take. */
    receivingDeadlineMs: number
    /** MAIL_LEASE_SECONDS: how long a mailer's claim on an email lasts unless renewed. */
    leaseMs: number
    /** SCHEDULE_HORIZON_DAYS: how far ahead a send may be scheduled. */
    scheduleHorizonDays: number
  }
}


/**
 * The send routes' body limit when SEND_BODY_LIMIT_BYTES is unset: the attachments' allowance in base64
 * (4 characters for 3 bytes) and 4 MiB more for an html and a text of up to 1 MiB each, JSON-escaped, and
 * the rest of a send; at least 15 MiB.
 */
export function defaultSendBodyLimit (attachmentsMaxBytes: number): number {
  return Math.max(15 * 1024 * 1024, Math.ceil(attachmentsMaxBytes / 3) * 4 + 4 * 1024 * 1024)
}

export class ConfigError extends Error {
  constructor (readonly problems: string[]) {
    super(problems.join('\n'))
    this.name = 'ConfigError'
  }
}

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }

/** "5s,2m,1h" → [5000, 120000, 3600000]; the schema has already checked the shape. */
export function parseDurations (text: string): number[] {
  return text.split(',').map((part) => {
    const m = /^(\d+)(ms|s|m|h|d)$/.exec(part.trim())
    return Number(m![1]) * UNIT_MS[m![2]!]!
  })
}

function describe (schema: TSchema): string {
  const { description } = schema as TSchemaOptions
  return typeof description === 'string' ? description : 'a valid value'
}

/**
 * Validates the environment once. Throws ConfigError with one line per bad variable, naming it and
 * what it expects; a secret's value is never repeated in the message.
 */
export function loadConfig (env: Record<string, string | undefined>, defaults: { cores?: number; hostname?: string } = {}): Config {
  const raw: Record<string, unknown> = {}
  for (const key of Object.keys(EnvSchema.properties)) {
    const value = env[key]
    if (value !== undefined && value !== '') raw[key] = value
  }
  const converted = Value.Convert(EnvSchema, structuredClone(raw)) as Record<string, unknown>
  // Convert makes "1.5" the integer 1: a whole-number variable is taken only as digits, else refused as given.
  for (const [key, schema] of Object.entries(EnvSchema.properties as Record<string, TSchema>)) {
    const value = raw[key]
    if ((schema as { type?: unknown }).type === 'integer' && typeof value === 'string' && !/^[+-]?[0-9]+$/.test(value.trim())) converted[key] = value
  }
  const candidate = Value.Default(EnvSchema, converted)
  const problems: string[] = []
  const seen = new Set<string>()
  for (const error of Value.Errors(EnvSchema, candidate)) {
    const key = error.instancePath.split('/')[1] ?? ''
    if (seen.has(key)) continue
    seen.add(key)
    const schema = (EnvSchema.properties as Record<string, TSchema>)[key]
    const got = SECRET_VARIABLES.has(key) ? '' : ` (got ${JSON.stringify(raw[key])})`
    problems.push(`${key} must be ${schema ? describe(schema) : 'valid'}${got}`)
  }
  const e = candidate as Env
  // Development rules (http:// webhooks to private addresses, cookies without Secure, no sender domains)
  // are only ever assumed on an address no other machine can reach.
  if (problems.length === 0 && e.NODE_ENV === undefined && !isLoopbackHost(e.HOST)) {
    problems.push(`NODE_ENV must be set when HOST is not a loopback address (HOST is ${JSON.stringify(e.HOST)}): ` +
      'NODE_ENV=production for a server other machines reach, or NODE_ENV=development to accept development rules on it')
  }
  const mode = e.NODE_ENV ?? 'development'
  const production = mode === 'production'
  if (problems.length === 0 && production && e.SVC_SECRET === undefined) {
    problems.push('SVC_SECRET must be set in production (a random string of at least 32 characters)')
  }
  if (problems.length === 0 && e.TRUST_PROXY !== 'false') {
    try {
      if (/^[0-9]+$/.test(e.TRUST_PROXY)) {
        if (Number(e.TRUST_PROXY) < 1 || Number(e.TRUST_PROXY) > 99) throw new Error('hops')
      } else {
        parseProxyList(e.TRUST_PROXY)
      }
    } catch {
      problems.push(`TRUST_PROXY must be ${describe(EnvSchema.properties.TRUST_PROXY)} (got ${JSON.stringify(e.TRUST_PROXY)})`)
    }
  }
  if (problems.length === 0 && e.DNS_SERVERS !== undefined) {
    for (const server of e.DNS_SERVERS.split(',').map((s) => s.trim())) {
      try {
        new Resolver().setServers([server])
      } catch {
        problems.push(`DNS_SERVERS must be ${describe(EnvSchema.properties.DNS_SERVERS)} (got ${JSON.stringify(server)})`)
        break
      }
    }
  }
  if (problems.length === 0) problems.push(...inboundTlsProblems(e.INBOUND_TLS_CERT, e.INBOUND_TLS_KEY))
  if (problems.length > 0) throw new ConfigError(problems)

  const publicUrl = (e.PUBLIC_URL ?? `http://${urlHost(e.HOST)}:${e.PORT}`).replace(/\/$/, '')
  let own: string
  try {
    own = new URL(publicUrl).origin
  } catch {
    throw new ConfigError([e.PUBLIC_URL !== undefined
      ? `PUBLIC_URL must be ${describe(EnvSchema.properties.PUBLIC_URL)} (got ${JSON.stringify(e.PUBLIC_URL)})`
      : `HOST must be ${describe(EnvSchema.properties.HOST)} (got ${JSON.stringify(e.HOST)}), or set PUBLIC_URL`])
  }
  const allowedOrigins = production
    ? [own]
    : [...new Set([own, ...['localhost', '127.0.0.1', '[::1]'].map((h) => `http://${h}:${e.PORT}`)])]
  const warnings: string[] = []
  if (!production && !isLoopbackHost(e.HOST)) {
    warnings.push(`NODE_ENV=${mode} on HOST ${e.HOST}, which other machines may reach: development rules are on ` +
      '(http:// and private webhook URLs, cookies without Secure, no sender domains, open signup, no quotas); use NODE_ENV=production')
  }
  if (production && e.METRICS_TOKEN === undefined) {
    warnings.push('METRICS_TOKEN is not set: /metrics is not served (404) in production; set METRICS_TOKEN (at least 16 random characters) ' +
      'and scrape with it as a bearer token')
  }
  if (production && (e.PUBLIC_URL === undefined || isLoopbackUrl(publicUrl))) {
    warnings.push(`PUBLIC_URL is ${e.PUBLIC_URL === undefined ? 'not set' : 'a loopback address'}: tracking and unsubscribe links in ` +
      `emails point to ${publicUrl}, which recipients cannot reach, and browsers are accepted only from that origin; ` +
      'set PUBLIC_URL to the address users reach svc at, like https://mail.example.com')
  }

  return {
    port: e.PORT,
    host: e.HOST,
    env: mode,
    production,
    secret: e.SVC_SECRET,
    dataDir: e.DATA_DIR,
    mongodbUri: e.MONGODB_URI,
    mongodbWriteConcern: e.MONGODB_WRITE_CONCERN === 'majority' ? 'majority' : Number(e.MONGODB_WRITE_CONCERN),
    smtpUrl: e.SMTP_URL,
    smtpPoolSize: e.SMTP_POOL_SIZE,
    smtpConnectionLimits: { maxMessages: e.SMTP_CONNECTION_MAX_MESSAGES, maxAgeMs: e.SMTP_CONNECTION_MAX_AGE * 1000 },
    mailFrom: e.MAIL_FROM,
    sandboxKeep: e.SANDBOX_KEEP ?? (production ? 0 : 200),
    publicUrl,
    allowedOrigins,
    warnings,
    nodeId: e.NODE_ID ?? (defaults.hostname ?? 'svc').replace(/[^A-Za-z0-9._:-]/g, '-').slice(0, 100),
    deliveryThreads: e.DELIVERY_THREADS ?? Math.max(1, defaults.cores ?? 2),
    webhookAllowedCidrs: e.WEBHOOK_ALLOWED_CIDRS,
    retentionDays: e.RETENTION_DAYS,
    delivery: {
      timeoutMs: e.DELIVERY_TIMEOUT_MS,
      retrySchedule: parseDurations(e.DELIVERY_RETRY_SCHEDULE),
      window: e.DELIVERY_WINDOW,
      windowMin: Math.min(e.DELIVERY_WINDOW, e.DELIVERY_WINDOW_MIN),
      windowInitial: Math.min(e.DELIVERY_WINDOW, Math.max(e.DELIVERY_WINDOW_MIN, e.DELIVERY_WINDOW_INITIAL)),
      downAfterMs: e.DELIVERY_DOWN_AFTER_SECONDS * 1000,
      leaseMs: Math.max(2, e.DELIVERY_LEASE_SECONDS) * 1000,
      autoDisableMs: e.WEBHOOK_AUTO_DISABLE_HOURS * 3_600_000,
    },
    logLevel: e.LOG_LEVEL,
    bodyLimit: e.BODY_LIMIT_BYTES,
    requestTimeoutMs: e.HTTP_REQUEST_TIMEOUT_SECONDS * 1000,
    sendBodyLimit: e.SEND_BODY_LIMIT_BYTES ?? defaultSendBodyLimit(e.ATTACHMENTS_MAX_BYTES),
    sendBudget: { bytes: e.SEND_BYTES_IN_FLIGHT, waitMs: 30_000 },
    attachments: { maxBytes: e.ATTACHMENTS_MAX_BYTES, maxCount: MAX_ATTACHMENTS, retentionMs: e.ATTACHMENT_RETENTION_HOURS * 3_600_000 },
    sessionTtlMs: e.SESSION_TTL_HOURS * 3_600_000,
    sessionMaxMs: Math.max(e.SESSION_MAX_HOURS, e.SESSION_TTL_HOURS) * 3_600_000,
    signupOpen: e.SIGNUP === undefined ? !production : e.SIGNUP === 'open',
    quotas: (e.QUOTAS === undefined ? production : e.QUOTAS === 'on')
      ? {
          free: { day: e.QUOTA_FREE_PER_DAY || null, month: e.QUOTA_FREE_PER_MONTH || null },
          pro: { day: e.QUOTA_PRO_PER_DAY || null, month: e.QUOTA_PRO_PER_MONTH || null },
        }
      : null,
    rateLimits: {
      authPerMinute: e.RATE_LIMIT_AUTH_PER_MINUTE,
      loginPerEmail: e.RATE_LIMIT_LOGIN_PER_EMAIL,
      loginFailures: e.RATE_LIMIT_LOGIN_FAILURES,
      costlyPerMinute: e.RATE_LIMIT_COSTLY_PER_MINUTE ?? (production ? 10 : 1000),
      apiPerSecond: e.RATE_LIMIT_API_PER_SECOND,
      readsPerMinute: e.RATE_LIMIT_READS_PER_MINUTE ?? (production ? 600 : 6000),
      writesPerMinute: e.RATE_LIMIT_WRITES_PER_MINUTE ?? (production ? 120 : 1200),
    },
    metricsToken: e.METRICS_TOKEN,
    metricsServed: !production || e.METRICS_TOKEN !== undefined,
    trustProxy: e.TRUST_PROXY === 'false' ? false : /^[0-9]+$/.test(e.TRUST_PROXY) ? Number(e.TRUST_PROXY) : parseProxyList(e.TRUST_PROXY),
    roles: parseRoles(e.SVC_ROLES),
    rateLimitStore: e.RATE_LIMIT_STORE === 'auto' ? (e.MONGODB_URI !== undefined ? 'store' : 'memory') : e.RATE_LIMIT_STORE,
    dnsServers: e.DNS_SERVERS === undefined ? [] : e.DNS_SERVERS.split(',').map((s) => s.trim()).filter((s) => s !== ''),
    mail: {
      requireVerifiedDomain: e.REQUIRE_VERIFIED_DOMAIN === undefined ? production : e.REQUIRE_VERIFIED_DOMAIN === 'true',
      bounceDomain: e.BOUNCE_DOMAIN,
      inbound: {
        port: e.INBOUND_SMTP_PORT,
        host: e.INBOUND_SMTP_HOST,
        ipv4Prefix: e.INBOUND_IPV4_PREFIX,
        tls: e.INBOUND_TLS_CERT !== undefined && e.INBOUND_TLS_KEY !== undefined ? { certFile: e.INBOUND_TLS_CERT, keyFile: e.INBOUND_TLS_KEY } : undefined,
      },
      mxHost: e.INBOUND_MX_HOST ?? new URL(e.PUBLIC_URL ?? 'http://localhost').hostname.replace(/^\[(.*)\]$/, '$1'),
      complaintsAddress: e.COMPLAINTS_ADDRESS ?? (e.BOUNCE_DOMAIN !== undefined ? `complaints@${e.BOUNCE_DOMAIN}` : undefined),
      spfInclude: e.SPF_INCLUDE,
      receivingMaxBytes: e.INBOUND_MAX_BYTES,
      receivingDeadlineMs: e.INBOUND_JUDGE_DEADLINE_MS,
      leaseMs: Math.max(2, e.MAIL_LEASE_SECONDS) * 1000,
      scheduleHorizonDays: e.SCHEDULE_HORIZON_DAYS,
    },
  }
}

/**
 * The host part of the URL the server prints for HOST: the address itself, or 127.0.0.1 when HOST is every
 * interface (0.0.0.0, ::), which is what a browser on this machine uses.
 */
function urlHost (host: string): string {
  if (host === '0.0.0.0' || host === '::' || host === '[::]') return '127.0.0.1'
  return host.includes(':') && !host.startsWith('[') ? `[${host}]` : host
}

/**
 * INBOUND_TLS_CERT and INBOUND_TLS_KEY: both or neither; both files readable, a certificate and the key
 * that belongs to it. Read at start so that a mistake stops svc with a line saying which, instead of a
 * listener that fails every STARTTLS. Never quotes the files.
 */
function inboundTlsProblems (certFile: string | undefined, keyFile: string | undefined): string[] {
  if (certFile === undefined && keyFile === undefined) return []
  if (certFile === undefined || keyFile === undefined) {
    return [`INBOUND_TLS_CERT and INBOUND_TLS_KEY must be set together (only ${certFile !== undefined ? 'INBOUND_TLS_CERT' : 'INBOUND_TLS_KEY'} is set)`]
  }
  const read = (name: string, path: string): Buffer | string => {
    try {
      return readFileSync(path)
    } catch (err) {
      return `${name} must be a readable file (${JSON.stringify(path)}: ${(err as NodeJS.ErrnoException).code ?? 'unreadable'})`
    }
  }
  const cert = read('INBOUND_TLS_CERT', certFile)
  const key = read('INBOUND_TLS_KEY', keyFile)
  const unread = [cert, key].filter((v): v is string => typeof v === 'string')
  if (unread.length > 0) return unread
  let x509: X509Certificate
  try {
    x509 = new X509Certificate(cert)
  } catch {
    return [`INBOUND_TLS_CERT must be a PEM certificate (${JSON.stringify(certFile)} is not one)`]
  }
  try {
    // checkPrivateKey: a key of another type (an EC key beside an RSA certificate) passes createSecureContext.
    if (!x509.checkPrivateKey(createPrivateKey(key))) throw new Error('mismatch')
    createSecureContext({ cert, key })
  } catch {
    return [`INBOUND_TLS_KEY must be the PEM private key of INBOUND_TLS_CERT (${JSON.stringify(keyFile)} is not a key, or not this certificate's)`]
  }
  return []
}

/** HOST values only this machine can reach: localhost, 127.0.0.0/8, ::1. */
export function isLoopbackHost (host: string): boolean {
  const h = host.toLowerCase().replace(/^\[(.*)\]$/, '$1')
  if (h === 'localhost') return true
  if (!ipaddr.isValid(h)) return false
  const addr = ipaddr.process(h)
  return addr.range() === 'loopback'
}

/** "10.0.0.5, 10.1.0.0/16" → the list Fastify's trustProxy takes; throws on an entry that is not an address or range. */
function parseProxyList (text: string): string[] {
  return text.split(',').map((s) => s.trim()).filter((s) => s !== '').map((entry) => {
    const [address, bits] = entry.split('/')
    // Dotted quads or IPv6 only (ipaddr.js would also read "10" or "0x0a000001" as an address).
    if (!ipaddr.IPv4.isValidFourPartDecimal(address!) && !(address!.includes(':') && ipaddr.IPv6.isValid(address!))) throw new Error('address')
    if (bits !== undefined) ipaddr.parseCIDR(entry)
    return entry
  })
}

/** localhost, *.localhost, 127.0.0.0/8, ::1: nobody but this machine reaches them. */
function isLoopbackUrl (url: string): boolean {
  const host = new URL(url).hostname.toLowerCase().replace(/\.+$/, '')
  return host === 'localhost' || host.endsWith('.localhost') || /^127\.\d+\.\d+\.\d+$/.test(host) || host === '[::1]' || host === '0.0.0.0'
}

/** "api, mailer" → { api: true, mailer: true, delivery: false }; the schema has already checked the names. */
function parseRoles (text: string): Config['roles'] {
  const named = new Set(text.split(',').map((r) => r.trim()))
  return { api: named.has('api'), mailer: named.has('mailer'), delivery: named.has('delivery') }
}
