// The Store contract's cases for the closed-signup rule (createAccount with onlyIfFirst, which the
// account service asks for when signup is closed): of first signups at the same moment exactly one is
// first, on one store and across two stores on the same data (two processes, two nodes). Each case makes
// its own empty store, since "first" means the store has no account yet.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { newId } from '../../src/domain/ids.js'
import type { AccountRecord, Store } from '../../src/store/types.js'
import type { MakeStore } from './store-contract.js'

function racer (i: number): AccountRecord {
  return {
    id: newId('acct'),
    email: `first-${i}-${randomBytes(4).toString('hex')}@example.test`,
    passwordHash: `scrypt$${randomBytes(6).toString('hex')}`,
    plan: 'free',
    createdAt: new Date().toISOString(),
  }
}

/** `n` first signups at once, spread over `stores`; exactly one must be created, and only its account stored. */
async function race (stores: Store[], n: number): Promise<void> {
  const accounts = Array.from({ length: n }, (_, i) => racer(i))
  const results = await Promise.all(accounts.map((a, i) => stores[i % stores.length]!.createAccount(a, { onlyIfFirst: true })))
  assert.deepEqual([...results].sort(), ['created', ...Array<string>(n - 1).fill('not_first')], JSON.stringify(results))
  const winner = accounts[results.indexOf('created')]!
  for (const store of stores) {
    assert.deepEqual(await store.findAccountById(winner.id), winner)
    for (const loser of accounts.filter((a) => a !== winner)) {
      assert.equal(await store.findAccountById(loser.id), null)
      assert.equal(await store.findAccountByEmail(loser.email), null)
    }
  }
  // The rule goes on holding after the race.
  assert.equal(await stores[0]!.createAccount(racer(n), { onlyIfFirst: true }), 'not_first')
}

export function accountCreationCases (make: MakeStore): void {
  test('closed signup: of concurrent first signups on an empty store exactly one is created', async () => {
    for (let round = 0; round < 3; round++) {
      const made = await make()
      try {
        await race([made.store], 2 + round * 3)
      } finally {
        await made.cleanup()
      }
    }
  })

  test('closed signup: of concurrent first signups through two stores on the same data exactly one is created', async () => {
    for (let round = 0; round < 3; round++) {
      const made = await make()
      try {
        await race([made.store, await made.reopen()], 2 + round * 3)
      } finally {
        await made.cleanup()
      }
    }
  })
}
