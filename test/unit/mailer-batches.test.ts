// The mailer's claims and outcome writes, against a store and a transport in memory: emails are claimed in
// batches (not one claim per finished attempt), sends never exceed the concurrency, the emails leased at
// once stay bounded, every email is sent once, and outcomes reach the store several to a turn.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import type { FastifyBaseLogger } from 'fastify'
import { Mailer } from '../../src/mail/mailer.js'
import type { MailTransport, RecipientResult } from '../../src/mail/transport.js'
import type { EmailAttempt, EmailRecord } from '../../src/store/emails.js'
import type { Store } from '../../src/store/types.js'

const quiet = { info () {}, warn () {}, error () {}, debug () {}, child () { return quiet } } as unknown as FastifyBaseLogger

function email (i: number): EmailRecord {
  const at = new Date(Date.UTC(2026, 10, 26, 12, 0, 0, i)).toISOString()
  return {
    id: `em_${String(i).padStart(28, '0')}`, accountId: 'acct_1', from: 'svc <no-reply@example.com>', to: [`r${i}@example.com`], cc: [], bcc: [], replyTo: [],
    subject: `hello ${i}`, html: null, text: 'hi', headers: {}, tags: [], suppressed: [], recipients: [{ address: `r${i}@example.com`, state: 'pending' }],
    status: 'queued', attempts: 0, nextAttemptAt: at, leaseOwner: null, leaseExpiresAt: null, leaseToken: 0, lastError: null, createdAt: at, updatedAt: at,
  }
}

/** The mail queue in memory: due emails by due time, leases, and what each call saw. */
class FakeMailStore {
  readonly health = { failed: () => null }
  readonly due: EmailRecord[]
  claims: number[] = []
  leased = new Set<string>()
  mostLeased = 0
  recorded = new Map<string, number>()
  /** How many outcomes arrived in each turn of the event loop that had any. */
  perTurn: number[] = []
  private turnOpen = false

  constructor (count: number) { this.due = Array.from({ length: count }, (_, i) => email(i)) }

  async claimDueEmails (req: { owner: string; limit: number }): Promise<EmailRecord[]> {
    const taken = this.due.splice(0, req.limit).map((e) => ({ ...e, leaseOwner: req.owner, leaseToken: e.leaseToken + 1 }))
    if (taken.length > 0) this.claims.push(taken.length)
    for (const e of taken) this.leased.add(e.id)
    this.mostLeased = Math.max(this.mostLeased, this.leased.size)
    return taken
  }

  async recordEmailAttempt (a: EmailAttempt): Promise<boolean> {
    if (!this.turnOpen) {
      this.turnOpen = true
      this.perTurn.push(0)
      setImmediate(() => { this.turnOpen = false })
    }
    this.perTurn[this.perTurn.length - 1]! += 1
    this.recorded.set(a.emailId, (this.recorded.get(a.emailId) ?? 0) + 1)
    this.leased.delete(a.emailId)
    return true
  }

  async releaseEmailLeases (): Promise<number> { return 0 }
  async renewEmailLeases (_owner: string, leases: unknown[]): Promise<number> { return leases.length }
  async repairInterruptedWrites (): Promise<void> {}
  async pruneIdempotencyKeys (): Promise<number> { return 0 }
}

/** A relay that answers each message on a later turn, counting how many it holds at once. */
class SlowishTransport implements MailTransport {
  readonly name = 'fake'
  inFlight = 0
  mostInFlight = 0
  sent = 0
  async send (msg: { to: string[] }): Promise<RecipientResult[]> {
    this.inFlight += 1
    this.mostInFlight = Math.max(this.mostInFlight, this.inFlight)
    await new Promise((resolve) => setTimeout(resolve, 1))
    this.inFlight -= 1
    this.sent += 1
    return msg.to.map((recipient) => ({ recipient, outcome: 'delivered' as const, code: 250, response: '250 ok' }))
  }

  async close (): Promise<void> {}
}

test('500 due emails with a concurrency of 8: claimed in batches, never more than 8 sends at once, each sent and recorded once', async () => {
  const store = new FakeMailStore(500)
  const transport = new SlowishTransport()
  let wake: (n: number) => void = () => {}
  const mailer = new Mailer({
    store: store as unknown as Store,
    transport,
    closeTransport: false,
    emails: { onAccepted: (listener) => { wake = listener; return () => {} } },
    clock: { now: () => Date.UTC(2026, 10, 26, 12, 5) },
    logger: quiet,
    publicUrl: 'http://127.0.0.1:3000',
    secret: 'a-test-secret-of-enough-length-0123456789',
    concurrency: 8,
    pollMs: 60_000,
  })
  await mailer.start()
  wake(500)
  const deadline = Date.now() + 20_000
  while (store.recorded.size < 500 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5))
  await mailer.stop()

  assert.equal(store.recorded.size, 500, 'every email recorded')
  assert.ok([...store.recorded.values()].every((n) => n === 1), 'each recorded once')
  assert.equal(transport.sent, 500, 'each sent once')
  assert.ok(transport.mostInFlight <= 8, `at most 8 sends at once (saw ${transport.mostInFlight})`)
  // One claim per finished attempt would be ~500 claims of one; in batches of at least half a concurrency
  // (the last one may be smaller) it is at most 500 / 4 + 1.
  assert.ok(store.claims.length <= 126, `claims in batches (${store.claims.length} claims: ${store.claims.slice(0, 10).join(', ')}…)`)
  assert.ok(store.claims.slice(0, -1).every((n) => n >= 4), `every claim but the last takes at least half a concurrency (${store.claims.join(', ')})`)
  // Sending (8) + claimed ahead (up to 16 with the sends) + outcomes being written (up to 16).
  assert.ok(store.mostLeased <= 32, `the emails leased at once stay bounded (${store.mostLeased})`)
  const average = 500 / store.perTurn.length
  assert.ok(average >= 2, `outcomes reach the store several to a turn (${store.perTurn.length} turns for 500)`)
})
