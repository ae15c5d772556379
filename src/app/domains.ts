// Sender domains: what a domain name must look like, the DKIM key svc makes for it, the DNS records the
// owner publishes, how a DNS check turns into a status, and which sends a verified domain allows. The
// DKIM private key is sealed (domain/secrets.ts, bound to the domain's id) before it reaches the store,
// and is opened only to sign outgoing mail: no route ever returns it.
import { generateKeyPair, randomBytes } from 'node:crypto'
import { isIP } from 'node:net'
import { domainToASCII } from 'node:url'
import { promisify } from 'node:util'
import { DomainExists, DomainNotVerified, NotFound, ValidationError, type ErrorDetail } from '../errors.js'
import type {
  AccountRecord, DnsRecordPurpose, DnsRecordStatus, DomainCheck, DomainRecord, DomainStatus, Store,
} from '../store/types.js'
import { iso, type Clock } from '../domain/clock.js'
import type { Dns } from '../domain/dns.js'
import { newId } from '../domain/ids.js'
import { planLimit, planLimitReached } from '../domain/plan-limits.js'
import { bounceHost, type SigningKey } from '../domain/sender-domains.js'
import { open, seal } from '../domain/secrets.js'

const generateKeyPairAsync = promisify(generateKeyPair)

const MAX_INPUT = 1024

export interface DomainSettings {
  /** BOUNCE_DOMAIN: when set, bounces.<name> is a CNAME to it (the operator publishes MX and SPF there once). */
  bounceDomain: string | undefined
  /** The host the bounce subdomain's MX points at (svc's inbound listener). */
  mxHost: string
  /** The SPF mechanism naming the relay: include:…, a:…, ip4:… or ip6:…. */
  spfMechanism: string
}

/**
 * The SPF mechanism for the relay: SPF_INCLUDE when the relay publishes its own list (include:amazonses.com),
 * else the relay's host from SMTP_URL (ip4:/ip6: for an address, a: for a name), else the MX host (a
 * relay on the same machine as svc).
 */
export function spfMechanism (o: { spfInclude: string | undefined; smtpUrl: string | undefined; mxHost: string }): string {
  if (o.spfInclude !== undefined) return `include:${o.spfInclude}`
  let host = o.mxHost
  if (o.smtpUrl !== undefined) {
    try {
      host = new URL(o.smtpUrl).hostname.replace(/^\[(.*)\]$/, '$1').toLowerCase() || host
    } catch {}
  }
  const family = isIP(host)
  return family === 4 ? `ip4:${host}` : family === 6 ? `ip6:${host}` : `a:${host}`
}

const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/

/** A domain name as given → lower-case ASCII (IDN in punycode), or what is wrong with it. */
export function normaliseDomainName (input: string): { name: string } | { error: string } {
  if (input.length > MAX_INPUT) return { error: 'is longer than 253 characters' }
  let text = input.trim()
  if (text.endsWith('.')) text = text.slice(0, -1)
  if (text === '') return { error: 'is empty' }
  if (isIP(text) !== 0 || text.startsWith('[')) return { error: 'is an IP address, not a domain name' }
  // The name alone: domainToASCII would quietly keep only the host of `example.com/path` or `a@example.com`.
  if (/[\s/:@?#\\[\]]/.test(text)) return { error: 'is not a domain name alone (no scheme, path, port, user or spaces)' }
  const ascii = domainToASCII(text).toLowerCase()
  if (ascii === '') return { error: 'is not a valid domain name' }
  if (ascii.length > 253) return { error: 'is longer than 253 characters' }
  const labels = ascii.split('.')
  if (labels.length < 2) return { error: 'needs at least two labels, like example.com' }
  for (const label of labels) {
    if (!LABEL.test(label)) return { error: 'has a label that is empty, longer than 63 characters, or holds characters other than letters, digits and inner hyphens' }
  }
  if (/^[0-9]+$/.test(labels[labels.length - 1]!)) return { error: 'has an all-numeric top-level label' }
  return { name: ascii }
}

/** The bare address's domain, lower case; '' when there is none. */
export function domainOfAddress (address: string): string {
  const at = address.lastIndexOf('@')
  return at < 0 ? '' : address.slice(at + 1).toLowerCase()
}

// The records.

export interface DnsRecordView {
  type: 'TXT' | 'MX' | 'CNAME'
  name: string
  value: string
  /** MX only. */
  priority?: number
  purpose: DnsRecordPurpose
  /** Whether the domain's status depends on it (DMARC is a suggestion). */
  required: boolean
  status: DnsRecordStatus
}

export function dkimRecordValue (publicKey: string): string {
  return `v=DKIM1; k=rsa; p=${publicKey}`
}

export function dnsRecords (d: Pick<DomainRecord, 'name' | 'selector' | 'publicKey' | 'records' | 'receiving'>, s: DomainSettings): DnsRecordView[] {
  const bounce = bounceHost(d.name)
  const list: DnsRecordView[] = [
    { type: 'TXT', name: `${d.selector}._domainkey.${d.name}`, value: dkimRecordValue(d.publicKey), purpose: 'dkim', required: true, status: d.records.dkim },
  ]
  if (s.bounceDomain !== undefined) {
    list.push({ type: 'CNAME', name: bounce, value: s.bounceDomain, purpose: 'return_path', required: true, status: d.records.return_path })
    // Reached through the CNAME: the operator publishes it once, on BOUNCE_DOMAIN.
    list.push({ type: 'TXT', name: s.bounceDomain, value: `v=spf1 ${s.spfMechanism} ~all`, purpose: 'spf', required: true, status: d.records.spf })
  } else {
    list.push({ type: 'MX', name: bounce, value: s.mxHost, priority: 10, purpose: 'return_path', required: true, status: d.records.return_path })
    list.push({ type: 'TXT', name: bounce, value: `v=spf1 ${s.spfMechanism} ~all`, purpose: 'spf', required: true, status: d.records.spf })
  }
  list.push({ type: 'TXT', name: `_dmarc.${d.name}`, value: 'v=DMARC1; p=none; adkim=r; aspf=r', purpose: 'dmarc', required: false, status: d.records.dmarc })
  // Receiving (PATCH { receiving: true }): the domain's own MX to the inbound listener. Not required for the
  // domain's status: sending goes on while it is being published; mail arrives once it is.
  if (d.receiving) list.push({ type: 'MX', name: d.name, value: s.mxHost, priority: 10, purpose: 'receiving', required: false, status: d.records.receiving })
  return list
}

/** The tags of a DKIM or DMARC TXT record (`k=v; k=v`), names lower case, values without white space. */
function tags (record: string): Map<string, string> {
  const out = new Map<string, string>()
  for (const part of record.split(';')) {
    const eq = part.indexOf('=')
    if (eq < 0) continue
    out.set(part.slice(0, eq).trim().toLowerCase(), part.slice(eq + 1).replace(/\s+/g, ''))
  }
  return out
}

type Found = DnsRecordStatus | 'unknown'

async function look (query: () => Promise<boolean>): Promise<Found> {
  try {
    return (await query()) ? 'verified' : 'failed'
  } catch {
    // DNS itself failed (timeout, SERVFAIL): nothing is learned about the record.
    return 'unknown'
  }
}

/**
 * Asks DNS for every record of the domain. A record is verified when DNS holds it as shown; failed when
 * it is absent or different; a DNS failure leaves the record's previous status as it was. The domain is
 * verified when every required record is; when one goes missing it is failed (pending if it never was
 * verified).
 */
export async function checkDomain (d: DomainRecord, dns: Dns, s: DomainSettings, now: number): Promise<DomainCheck> {
  const bounce = bounceHost(d.name)
  const [dkim, returnPath, spf, dmarc, receiving] = await Promise.all([
    look(async () => (await dns.txt(`${d.selector}._domainkey.${d.name}`)).some((r) => {
      const t = tags(r)
      return (t.get('v') ?? 'DKIM1') === 'DKIM1' && t.get('p') === d.publicKey
    })),
    look(async () => s.bounceDomain !== undefined
      ? (await dns.cname(bounce)).includes(s.bounceDomain)
      : (await dns.mx(bounce)).some((m) => m.exchange === s.mxHost)),
    // Through the CNAME when there is one: the resolver follows it.
    look(async () => (await dns.txt(bounce)).some((r) => {
      const terms = r.trim().toLowerCase().split(/\s+/)
      return terms[0] === 'v=spf1' && terms.some((t) => t.replace(/^[+]/, '') === s.spfMechanism)
    })),
    look(async () => (await dns.txt(`_dmarc.${d.name}`)).some((r) => tags(r).get('v')?.toUpperCase() === 'DMARC1')),
    d.receiving ? look(async () => (await dns.mx(d.name)).some((m) => m.exchange === s.mxHost)) : Promise.resolve<Found>('pending'),
  ])
  const keep = (found: Found, before: DnsRecordStatus): DnsRecordStatus => (found === 'unknown' ? before : found)
  const records = {
    dkim: keep(dkim, d.records.dkim),
    return_path: keep(returnPath, d.records.return_path),
    spf: keep(spf, d.records.spf),
    dmarc: keep(dmarc, d.records.dmarc),
    receiving: d.receiving ? keep(receiving, d.records.receiving) : 'pending',
  }
  const allRequired = records.dkim === 'verified' && records.return_path === 'verified' && records.spf === 'verified'
  const at = iso(now)
  let status: DomainStatus
  if (allRequired) status = 'verified'
  else status = d.verifiedAt !== null ? 'failed' : 'pending'
  return {
    status,
    records,
    checkedAt: at,
    verifiedAt: allRequired ? (d.status === 'verified' ? d.verifiedAt ?? at : at) : d.verifiedAt,
  }
}

export interface DomainView {
  id: string
  name: string
  status: DomainStatus
  records: DnsRecordView[]
  createdAt: string
  lastCheckedAt: string | null
  verifiedAt: string | null
  /** Whether mail to the domain is taken (PATCH { receiving }); with it, the `receiving` MX record. */
  receiving: boolean
  /**
   * Whether sends from this domain that do not choose get an open pixel and tracked links (PATCH
   * { tracking }). Never set: the account's default, which is on (svc has no account-level setting).
   */
  tracking: { opens: boolean; clicks: boolean }
}

/** The tracking of sends that choose nothing, from a domain that never set its own: on. */
export const ACCOUNT_TRACKING_DEFAULT = { opens: true, clicks: true } as const

/** A domain's tracking defaults as a send takes them: an unset one falls back to the account's. */
export function trackingDefaultsOf (d: Pick<DomainRecord, 'tracking'> | null): { opens: boolean; clicks: boolean } {
  return {
    opens: d?.tracking?.opens ?? ACCOUNT_TRACKING_DEFAULT.opens,
    clicks: d?.tracking?.clicks ?? ACCOUNT_TRACKING_DEFAULT.clicks,
  }
}

export interface DomainServiceOptions {
  store: Store
  clock: Clock
  secret: string
  dns: Dns
  settings: DomainSettings
  requireVerified: boolean
}

export function newSelector (): string {
  return `svc${randomBytes(4).toString('hex')}`
}

/** How long the mailer trusts a domain's signing key (or its absence) before reading it again. */
export const SIGNING_KEY_TTL_MS = 5_000
const SIGNING_KEYS_KEPT = 1_000

export function createDomainService ({ store, clock, secret, dns, settings, requireVerified }: DomainServiceOptions) {
  function view (d: DomainRecord): DomainView {
    return {
      id: d.id,
      name: d.name,
      status: d.status,
      records: dnsRecords(d, settings),
      createdAt: d.createdAt,
      lastCheckedAt: d.lastCheckedAt,
      verifiedAt: d.verifiedAt,
      receiving: d.receiving,
      tracking: trackingDefaultsOf(d),
    }
  }

  async function find (accountId: string, id: string): Promise<DomainRecord> {
    const d = await store.findDomain(accountId, id)
    if (d === null) throw NotFound('No domain with this id')
    return d
  }

  async function check (d: DomainRecord): Promise<DomainRecord | null> {
    const result = await checkDomain(d, dns, settings, clock.now())
    try {
      return await store.updateDomainCheck(d.accountId, d.id, result)
    } finally {
      signing.clear()
    }
  }

  // The mailer asks for the signing key of every email it sends: each answer (a key, or none) is kept for
  // SIGNING_KEY_TTL_MS, so that a send costs no lookup and no unsealing of the key. A change made through
  // this service forgets them all at once; one made on another node is seen here within the TTL.
  const signing = new Map<string, { until: number; key: SigningKey | null }>()
  // Each send that leaves a tracking choice out asks for its domain's defaults: kept the same way.
  const tracking = new Map<string, { until: number; defaults: { opens: boolean; clicks: boolean } }>()

  return {
    view,

    async create (account: AccountRecord, input: { name: string }): Promise<DomainView> {
      const n = normaliseDomainName(input.name)
      if ('error' in n) throw ValidationError('The request is not valid', [{ path: 'body.name', message: n.error }])
      const limit = planLimit(account.plan, 'domains')
      // Cheap refusals before the key is made (tens of milliseconds, off the event loop): a domain the
      // account has already is said so first, whatever the plan's room (as the store decides it too).
      const existing = await store.listDomains(account.id)
      if (existing.some((d) => d.name === n.name)) throw DomainExists(`${n.name} is already one of this account's domains`)
      if (existing.length >= limit) throw planLimitReached(account.plan, 'domains')
      const { publicKey, privateKey } = await generateKeyPairAsync('rsa', {
        modulusLength: 2048,
        publicKeyEncoding: { type: 'spki', format: 'der' },
        privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
      })
      const now = iso(clock.now())
      const id = newId('dom')
      const record: DomainRecord = {
        id,
        accountId: account.id,
        name: n.name,
        selector: newSelector(),
        publicKey: Buffer.from(publicKey).toString('base64'),
        privateKey: seal(secret, 'dkim private key', id, privateKey),
        status: 'pending',
        records: { dkim: 'pending', return_path: 'pending', spf: 'pending', dmarc: 'pending', receiving: 'pending' },
        createdAt: now,
        updatedAt: now,
        lastCheckedAt: null,
        verifiedAt: null,
        receiving: false,
      }
      const outcome = await store.insertDomain(record, limit)
      if (outcome === 'limit_reached') throw planLimitReached(account.plan, 'domains')
      if (outcome === 'name_taken') throw DomainExists(`${n.name} is already one of this account's domains`)
      return view(record)
    },

    async list (accountId: string): Promise<DomainView[]> {
      return (await store.listDomains(accountId)).map(view)
    },

    async get (accountId: string, id: string): Promise<DomainView> {
      return view(await find(accountId, id))
    },

    /** Checks DNS now and stores what it found. */
    async verify (accountId: string, id: string): Promise<DomainView> {
      const checked = await check(await find(accountId, id))
      if (checked === null) throw NotFound('No domain with this id')
      return view(checked)
    },

    /**
     * Turns receiving on or off. On: the domain's records gain its MX (checked by the next verify); mail
     * to any address at it is taken once the domain is verified. Off: the MX is no longer shown.
     */
    async setReceiving (accountId: string, id: string, receiving: boolean): Promise<DomainView> {
      const d = await store.setDomainReceiving(accountId, id, receiving, iso(clock.now()))
      signing.clear()
      if (d === null) throw NotFound('No domain with this id')
      return view(d)
    },

    /**
     * Sets the domain's tracking defaults (what is left out stays): sends accepted from then on that do
     * not choose take them; sends already accepted keep what they were accepted with.
     */
    async setTracking (accountId: string, id: string, choice: { opens?: boolean; clicks?: boolean }): Promise<DomainView> {
      const d = await store.setDomainTracking(accountId, id, choice, iso(clock.now()))
      tracking.clear()
      if (d === null) throw NotFound('No domain with this id')
      return view(d)
    },

    /**
     * The tracking defaults for a send from `fromAddress`: its domain's when the account has that domain,
     * else the account's (on). A change made on another node is seen here within SIGNING_KEY_TTL_MS.
     */
    async trackingDefaults (accountId: string, fromAddress: string): Promise<{ opens: boolean; clicks: boolean }> {
      const name = domainOfAddress(fromAddress)
      if (name === '') return trackingDefaultsOf(null)
      const cacheKey = `${accountId} ${name}`
      const now = clock.now()
      const kept = tracking.get(cacheKey)
      if (kept !== undefined && kept.until > now) return kept.defaults
      const defaults = trackingDefaultsOf(await store.findDomainByName(accountId, name))
      if (tracking.size >= SIGNING_KEYS_KEPT) tracking.delete(tracking.keys().next().value!)
      tracking.set(cacheKey, { until: now + SIGNING_KEY_TTL_MS, defaults })
      return defaults
    },

    async remove (accountId: string, id: string): Promise<void> {
      const deleted = await store.deleteDomain(accountId, id)
      signing.clear()
      tracking.clear()
      if (!deleted) throw NotFound('No domain with this id')
    },

    /** The background check: up to `limit` domains not checked for `intervalMs`. Returns how many were checked. */
    async recheckDue (intervalMs: number, limit: number, onError: (err: unknown, domainId: string) => void): Promise<number> {
      const due = await store.listDomainsCheckedBefore(iso(clock.now() - intervalMs), limit)
      for (const d of due) {
        try {
          await check(d)
        } catch (err) {
          onError(err, d.id)
        }
      }
      return due.length
    },

    /**
     * Refuses (DomainNotVerified) when sends must come from verified domains and one of these bare from
     * addresses is not on a verified domain of the account. `paths` name each address in the request.
     */
    async assertSenders (accountId: string, senders: Array<{ address: string; path: string }>): Promise<void> {
      if (!requireVerified) return
      const verdicts = new Map<string, boolean>()
      const refused: ErrorDetail[] = []
      for (const s of senders) {
        const name = domainOfAddress(s.address)
        if (!verdicts.has(name)) {
          const d = name === '' ? null : await store.findDomainByName(accountId, name)
          verdicts.set(name, d?.status === 'verified')
        }
        if (!verdicts.get(name)) refused.push({ path: s.path, message: `${name || 'this address'} is not a verified domain of this account (POST /api/domains)` })
      }
      if (refused.length > 0) throw DomainNotVerified(undefined, refused)
    },

    /** The key to sign mail from `fromAddress` with, when its domain is a verified domain of the account. */
    async signingKey (accountId: string, fromAddress: string): Promise<SigningKey | null> {
      const name = domainOfAddress(fromAddress)
      if (name === '') return null
      const cacheKey = `${accountId} ${name}`
      const now = clock.now()
      const kept = signing.get(cacheKey)
      if (kept !== undefined && kept.until > now) return kept.key
      const d = await store.findDomainByName(accountId, name)
      const key = d === null || d.status !== 'verified' ? null : { domainName: d.name, keySelector: d.selector, privateKey: open(secret, 'dkim private key', d.id, d.privateKey) }
      if (signing.size >= SIGNING_KEYS_KEPT) signing.delete(signing.keys().next().value!)
      signing.set(cacheKey, { until: now + SIGNING_KEY_TTL_MS, key })
      return key
    },
  }
}

export type DomainService = ReturnType<typeof createDomainService>
