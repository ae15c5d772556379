// Templates in the Store contract (src/store/templates.ts): heads and versions, the name and plan checks
// of an insert, changes that race, and deletion with every version. Called from storeContract(), so every
// adapter runs these.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { newId } from '../../src/domain/ids.js'
import type { TemplateHead, TemplateVersionRecord } from '../../src/store/templates.js'
import type { AccountRecord, Store } from '../../src/store/types.js'

const unique = (): string => randomBytes(6).toString('hex')
const iso = (ms: number): string => new Date(ms).toISOString()
let clock = Date.parse('2031-07-01T00:00:00.000Z')

async function account (store: Store): Promise<AccountRecord> {
  const a: AccountRecord = { id: newId('acct', ++clock), email: `tpl-${unique()}@example.test`, passwordHash: 'x', plan: 'free', createdAt: iso(clock) }
  assert.equal(await store.createAccount(a), 'created')
  return a
}

function template (accountId: string, name: string): { head: TemplateHead; first: TemplateVersionRecord } {
  const at = iso(++clock)
  const id = newId('tpl', clock)
  return {
    head: { id, accountId, name, version: 1, createdAt: at, updatedAt: at },
    first: {
      templateId: id, accountId, version: 1, subject: `Hello {{ name }} (${name})`, html: '<p>{{ name }}</p>', text: null,
      variables: [{ name: 'name', default: { nested: ['any', 'json', 1, null] } }, { name: 'plain' }], createdAt: at,
    },
  }
}

function next (v: TemplateVersionRecord, changes: Partial<TemplateVersionRecord>): TemplateVersionRecord {
  return { ...v, version: v.version + 1, createdAt: iso(++clock), ...changes }
}

export function templateCases (getStore: () => Store): void {
  test('templates: an insert keeps the head and version 1; names are unique per account; the plan limit holds', async () => {
    const store = getStore()
    const a = await account(store)
    const b = await account(store)
    const t = template(a.id, 'welcome')
    assert.equal(await store.insertTemplate(t.head, t.first, 3), 'created')
    assert.deepEqual(await store.findTemplate(a.id, { id: t.head.id }), t.head)
    assert.deepEqual(await store.findTemplate(a.id, { name: 'welcome' }), t.head)
    assert.deepEqual(await store.findTemplateVersion(a.id, t.head.id, 1), t.first, 'any JSON default survives')
    assert.equal(await store.findTemplate(b.id, { id: t.head.id }), null, 'another account sees nothing')
    assert.equal(await store.findTemplateVersion(b.id, t.head.id, 1), null)
    assert.equal(await store.findTemplate(a.id, { name: '{"$ne":""}' }), null)

    const same = template(a.id, 'welcome')
    assert.equal(await store.insertTemplate(same.head, same.first, 3), 'name_taken')
    const other = template(b.id, 'welcome')
    assert.equal(await store.insertTemplate(other.head, other.first, 3), 'created', 'the same name in another account')

    const two = template(a.id, 'two')
    assert.equal(await store.insertTemplate(two.head, two.first, 3), 'created')
    const third = template(a.id, 'three')
    assert.equal(await store.insertTemplate(third.head, third.first, 3), 'created')
    const fourth = template(a.id, 'four')
    assert.equal(await store.insertTemplate(fourth.head, fourth.first, 3), 'limit_reached')
    assert.equal(await store.findTemplate(a.id, { name: 'four' }), null)
    const list = await store.listTemplates(a.id)
    assert.deepEqual(list.map((x) => x.name), ['three', 'two', 'welcome'], 'newest first')
    assert.equal(list[2]!.subject, t.first.subject)

    // Concurrent inserts never pass the limit.
    const c = await account(store)
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => {
      const x = template(c.id, `race-${i}`)
      return store.insertTemplate(x.head, x.first, 3)
    }))
    assert.equal(results.filter((r) => r === 'created').length, 3)
    assert.equal((await store.listTemplates(c.id)).length, 3)
  })

  test('templates: a change makes the next version while the current is the one expected; old versions stay', async () => {
    const store = getStore()
    const a = await account(store)
    const t = template(a.id, 'receipt')
    assert.equal(await store.insertTemplate(t.head, t.first, 10), 'created')
    const v2 = next(t.first, { subject: 'v2', text: 'plain {{ name }}', html: null })
    assert.equal(await store.updateTemplate(a.id, t.head.id, 1, v2), 'updated')
    const stale = next(t.first, { subject: 'lost' })
    assert.equal(await store.updateTemplate(a.id, t.head.id, 1, stale), 'conflict', 'another change came first')
    const v3 = next(v2, { subject: 'v3' })
    assert.equal(await store.updateTemplate(a.id, t.head.id, 2, v3, 'receipt-new'), 'updated')

    const head = await store.findTemplate(a.id, { id: t.head.id })
    assert.deepEqual(head, { ...t.head, name: 'receipt-new', version: 3, updatedAt: v3.createdAt })
    assert.equal(await store.findTemplate(a.id, { name: 'receipt' }), null, 'renamed')
    assert.deepEqual(await store.findTemplateVersion(a.id, t.head.id, 1), t.first)
    assert.deepEqual(await store.findTemplateVersion(a.id, t.head.id, 2), v2)
    assert.deepEqual(await store.findTemplateVersion(a.id, t.head.id, 3), v3)
    assert.equal(await store.findTemplateVersion(a.id, t.head.id, 4), null)
    assert.deepEqual((await store.listTemplates(a.id)).map((x) => [x.version, x.subject]), [[3, 'v3']])

    const page = await store.listTemplateVersions(a.id, t.head.id, { limit: 2 })
    assert.deepEqual(page, [
      { version: 3, subject: 'v3', createdAt: v3.createdAt },
      { version: 2, subject: 'v2', createdAt: v2.createdAt },
    ])
    assert.deepEqual((await store.listTemplateVersions(a.id, t.head.id, { limit: 5, before: 2 })).map((v) => v.version), [1])
    assert.deepEqual(await store.listTemplateVersions(a.id, 'tpl_unknown', { limit: 5 }), [])

    // Two changes from the same version: one wins, the other is a conflict, and no version is lost.
    const outcomes = await Promise.all([
      store.updateTemplate(a.id, t.head.id, 3, next(v3, { subject: 'left' })),
      store.updateTemplate(a.id, t.head.id, 3, next(v3, { subject: 'right' })),
    ])
    assert.deepEqual([...outcomes].sort(), ['conflict', 'updated'])
    const won = await store.findTemplateVersion(a.id, t.head.id, 4)
    assert.equal(won?.subject, outcomes[0] === 'updated' ? 'left' : 'right')
    assert.deepEqual(await store.findTemplateVersion(a.id, t.head.id, 3), v3)

    const other = template(a.id, 'other')
    assert.equal(await store.insertTemplate(other.head, other.first, 10), 'created')
    assert.equal(await store.updateTemplate(a.id, other.head.id, 1, next(other.first, {}), 'receipt-new'), 'name_taken')
    assert.equal((await store.findTemplate(a.id, { id: other.head.id }))?.version, 1, 'nothing of a refused change is written')
    assert.equal(await store.updateTemplate(a.id, 'tpl_unknown', 1, next(other.first, {})), 'not_found')
  })

  test('templates: a delete takes every version and frees the name and the plan slot', async () => {
    const store = getStore()
    const a = await account(store)
    const t = template(a.id, 'gone')
    assert.equal(await store.insertTemplate(t.head, t.first, 1), 'created')
    assert.equal(await store.updateTemplate(a.id, t.head.id, 1, next(t.first, { subject: 'v2' })), 'updated')
    const b = await account(store)
    assert.equal(await store.deleteTemplate(b.id, t.head.id), false, 'not another account\'s')
    assert.equal(await store.deleteTemplate(a.id, t.head.id), true)
    assert.equal(await store.deleteTemplate(a.id, t.head.id), false)
    assert.equal(await store.findTemplate(a.id, { id: t.head.id }), null)
    assert.equal(await store.findTemplateVersion(a.id, t.head.id, 1), null)
    assert.equal(await store.findTemplateVersion(a.id, t.head.id, 2), null)
    assert.deepEqual(await store.listTemplateVersions(a.id, t.head.id, { limit: 10 }), [])
    const again = template(a.id, 'gone')
    assert.equal(await store.insertTemplate(again.head, again.first, 1), 'created', 'the name and the one slot are free again')
  })
}
