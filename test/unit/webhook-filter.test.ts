// The webhook filter rule (src/domain/webhook-filter.ts): what a filter takes, how a request's filter is
// checked, and that nothing in it is more than linear on hostile input.
import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { normaliseDomainName } from '../../src/app/domains.js'
import {
  FILTER_LIMITS, compileFilter, compileStoredFilter, domainOf, emailTagsOf, eventRoute, filterAccepts, normaliseWebhookFilter, readStoredFilter,
  receivedFacts, routeFacts, sentEmailFacts, serialiseFilter, type WebhookFilter, type WebhookFilterInput,
} from '../../src/domain/webhook-filter.js'

const MEGABYTE = 1024 * 1024

function normalised (input: WebhookFilterInput | null | undefined): WebhookFilter | null {
  const r = normaliseWebhookFilter(input, normaliseDomainName)
  assert.ok('filter' in r, JSON.stringify(r))
  return r.filter
}

function problems (input: WebhookFilterInput): Array<{ path: string; message: string }> {
  const r = normaliseWebhookFilter(input, normaliseDomainName)
  if (!('problems' in r)) assert.fail(`expected problems for ${JSON.stringify(input).slice(0, 200)}`)
  return r.problems
}

function takes (filter: WebhookFilterInput | null, facts: ReturnType<typeof sentEmailFacts> | null): boolean {
  return filterAccepts(compileFilter(normalised(filter)), facts)
}

describe('what a filter takes', () => {
  const shop = sentEmailFacts('Shop <orders@Shop.Example.com>', [{ name: 'kind', value: 'receipt' }, { name: 'tenant', value: 't-42' }])
  const news = sentEmailFacts('news@news.example.com', [{ name: 'kind', value: 'newsletter' }])

  test('no filter takes every event, emails or none', () => {
    assert.equal(filterAccepts(null, shop), true)
    assert.equal(filterAccepts(null, null), true)
    assert.equal(normalised(null), null)
    assert.equal(normalised(undefined), null)
    assert.equal(normalised({}), null, 'a filter with neither list is no filter')
    assert.equal(normalised({ domains: [], tags: [] }), null, 'empty lists set no condition')
  })

  test('domains: the From domain, exactly and in any case; a subdomain is another domain', () => {
    assert.equal(takes({ domains: ['shop.example.com'] }, shop), true)
    assert.equal(takes({ domains: ['SHOP.example.COM.'] }, shop), true, 'the filter is normalised too (case, a final dot)')
    assert.equal(takes({ domains: ['example.com'] }, shop), false, 'a parent domain does not take its subdomains')
    assert.equal(takes({ domains: ['news.example.com', 'shop.example.com'] }, news), true)
    assert.equal(takes({ domains: ['shop.example.com'] }, news), false)
  })

  test('tags: at least one listed tag; a name alone takes any value of it', () => {
    assert.equal(takes({ tags: [{ name: 'kind', value: 'receipt' }] }, shop), true)
    assert.equal(takes({ tags: [{ name: 'kind', value: 'newsletter' }] }, shop), false)
    assert.equal(takes({ tags: [{ name: 'kind' }] }, news), true)
    assert.equal(takes({ tags: [{ name: 'Kind' }] }, news), false, 'tags are compared as written')
    assert.equal(takes({ tags: [{ name: 'other' }, { name: 'tenant', value: 't-42' }] }, shop), true)
    assert.equal(takes({ tags: [{ name: 'kind', value: 'receipt' }] }, sentEmailFacts('a@shop.example.com', [])), false, 'an email without tags')
  })

  test('both lists: both must match', () => {
    const both = { domains: ['shop.example.com'], tags: [{ name: 'kind', value: 'receipt' }] }
    assert.equal(takes(both, shop), true)
    assert.equal(takes(both, sentEmailFacts('a@shop.example.com', [{ name: 'kind', value: 'newsletter' }])), false)
    assert.equal(takes(both, sentEmailFacts('a@other.example', [{ name: 'kind', value: 'receipt' }])), false)
  })

  test('received mail matches by a recipient\'s domain and has no tags; an event without its email matches no condition', () => {
    const received = receivedFacts(['support@help.example.com', 'billing@Shop.example.com'])
    assert.deepEqual([...received.domains].sort(), ['help.example.com', 'shop.example.com'])
    assert.equal(takes({ domains: ['shop.example.com'] }, received), true)
    assert.equal(takes({ domains: ['other.example'] }, received), false)
    assert.equal(takes({ tags: [{ name: 'kind' }] }, received), false)
    assert.equal(takes({ domains: ['shop.example.com'] }, null), false)
  })

  test('an event\'s route carries its email\'s facts; one that cannot be read is none (routing looks the email up)', () => {
    const route = eventRoute('Shop <orders@Shop.Example.com>', [{ name: 'kind', value: 'receipt' }])
    assert.deepEqual(routeFacts(route), { domains: ['shop.example.com'], tags: [{ name: 'kind', value: 'receipt' }], tagKeys: ['kind\nreceipt'] })
    assert.equal(takes({ domains: ['shop.example.com'], tags: [{ name: 'kind' }] }, routeFacts(route)), true)
    for (const bad of ['', '{', 'null', '[]', '{"domain":1,"tags":[]}', '{"domain":"a","tags":[["x"]]}', '{"domain":"a","tags":{}}']) {
      assert.equal(routeFacts(bad), null, bad)
    }
    const huge = eventRoute('a@b.example', Array.from({ length: 40_000 }, (_, i) => ({ name: `n${i}`, value: 'v'.repeat(20) })))
    assert.ok(huge.length > MEGABYTE)
    assert.equal(routeFacts(huge)?.tags.length, 40_000)
    assert.equal(routeFacts(`{"domain":"a","tags":${'['.repeat(MEGABYTE)}`), null)
  })

  test('a stored filter round-trips; one that cannot be read matches nothing (fails closed)', () => {
    const f = normalised({ domains: ['shop.example.com'], tags: [{ name: 'kind' }, { name: 'tenant', value: 't-42' }] })
    const stored = serialiseFilter(f)
    assert.deepEqual(readStoredFilter(stored), f)
    assert.equal(filterAccepts(compileStoredFilter(stored), shop), true)
    assert.equal(compileStoredFilter(null), null)
    assert.equal(serialiseFilter(null), null)
    for (const bad of ['{not json', '"a string"', '{"domains":"shop.example.com"}', '{"tags":[{"value":"x"}]}', '[1,2]']) {
      assert.equal(filterAccepts(compileStoredFilter(bad), shop), false, bad)
      assert.equal(filterAccepts(compileStoredFilter(bad), null), false, bad)
    }
  })
})

describe('a request\'s filter', () => {
  test('duplicates are dropped, the first kept; domain names are stored lower-case ASCII', () => {
    assert.deepEqual(normalised({
      domains: ['Shop.Example.com', 'shop.example.com', 'bücher.example'],
      tags: [{ name: 'kind' }, { name: 'kind' }, { name: 'kind', value: 'a' }, { name: 'kind', value: 'a' }],
    }), { domains: ['shop.example.com', 'xn--bcher-kva.example'], tags: [{ name: 'kind' }, { name: 'kind', value: 'a' }] })
  })

  test('every bad item is named by its path', () => {
    assert.deepEqual(problems({ domains: ['ok.example', 'not a domain', 'localhost'], tags: [{ name: 'ok' }, { name: 'bad name' }, { name: 'x', value: '' }] }).map((p) => p.path), [
      'body.filter.domains[1]', 'body.filter.domains[2]', 'body.filter.tags[1]', 'body.filter.tags[2]',
    ])
    assert.match(problems({ domains: ['https://shop.example.com/'] })[0]!.message, /domain name alone/)
  })

  test(`at most ${FILTER_LIMITS.maxDomains} domains and ${FILTER_LIMITS.maxTags} tags, checked before any item is read`, () => {
    const domains = Array.from({ length: FILTER_LIMITS.maxDomains }, (_, i) => `d${i}.example`)
    const tags = Array.from({ length: FILTER_LIMITS.maxTags }, (_, i) => ({ name: `t${i}` }))
    assert.equal(normalised({ domains, tags })!.domains.length, FILTER_LIMITS.maxDomains)
    let read = 0
    const counted = (n: number) => Array.from({ length: n }, () => ({ get name () { read++; return 'x' } }))
    const over = problems({ domains: [...domains, 'one-more.example'], tags: counted(FILTER_LIMITS.maxTags + 1) })
    assert.deepEqual(over.map((p) => p.path), ['body.filter.domains', 'body.filter.tags'])
    assert.equal(read, 0, 'no tag was read once the list was too long')
  })
})

describe('hostile input stays linear', () => {
  test('a megabyte From, tag list, domain or tag name', () => {
    const from = `${'"'.repeat(MEGABYTE)}<${'a'.repeat(MEGABYTE)}@${'b.'.repeat(MEGABYTE / 2)}example>`
    assert.equal(domainOf(from).length, MEGABYTE + 'example'.length)
    assert.equal(domainOf('@'.repeat(MEGABYTE)), '')
    assert.equal(domainOf('<'.repeat(MEGABYTE)), '')
    const tagsJson = JSON.stringify(Array.from({ length: 40_000 }, (_, i) => ({ name: `n${i}`, value: 'v'.repeat(20) })))
    assert.ok(tagsJson.length > MEGABYTE)
    assert.equal(emailTagsOf(tagsJson).length, 40_000)
    assert.deepEqual(emailTagsOf('['.repeat(MEGABYTE)), [])
    assert.deepEqual(emailTagsOf(`[${'{"name":1},'.repeat(MEGABYTE / 11)}null]`), [])
    // The filter itself: a megabyte item is refused on its length, a megabyte of nesting is no filter.
    assert.equal(problems({ domains: ['a'.repeat(MEGABYTE)] })[0]!.path, 'body.filter.domains[0]')
    assert.equal(problems({ tags: [{ name: 'a'.repeat(MEGABYTE) }] })[0]!.path, 'body.filter.tags[0]')
    assert.equal(problems({ tags: [{ name: `${'a'.repeat(MEGABYTE)}!` }] })[0]!.path, 'body.filter.tags[0]')
    assert.equal(filterAccepts(compileStoredFilter(`{"domains":${'['.repeat(MEGABYTE)}`), null), false)
    // An email with a megabyte of tags against a filter of the most tags: one set lookup per tag.
    const filter = compileFilter(normalised({ tags: Array.from({ length: FILTER_LIMITS.maxTags }, (_, i) => ({ name: `z${i}`, value: 'v' })) }))
    assert.equal(filterAccepts(filter, sentEmailFacts('a@b.example', emailTagsOf(tagsJson))), false)
  })
})
