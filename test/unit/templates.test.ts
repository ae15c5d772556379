// The render rules (src/mail/render-template.ts, src/domain/templates.ts) and the template service's
// send path (src/app/templates.ts) with a fake store, clock and stopwatch.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { isAppError } from '../../src/errors.js'
import { DEFAULT_RENDER_LIMITS, TEMPLATE_LIMITS, countTags, type RenderLimits, type TemplateContent } from '../../src/domain/templates.js'
import { TemplateCache, compileTemplate, renderBudget, renderTemplate, type CompiledTemplate } from '../../src/mail/render-template.js'
import { createTemplateService } from '../../src/app/templates.js'
import type { TemplateHead, TemplateVersionRecord } from '../../src/store/templates.js'
import type { Store } from '../../src/store/types.js'

function compiled (content: Partial<TemplateContent>): CompiledTemplate {
  const r = compileTemplate({ subject: 's', html: null, text: null, variables: [], ...content })
  if ('errors' in r) throw new Error(JSON.stringify(r.errors))
  return r.compiled
}

function refusedAtSave (content: Partial<TemplateContent>): string {
  const r = compileTemplate({ subject: 's', html: null, text: null, variables: [], ...content })
  assert.ok('errors' in r, 'refused at save')
  return r.errors.map((e) => `${e.path}: ${e.message}`).join('; ')
}

const render = (c: CompiledTemplate, variables: Record<string, unknown>, limits: RenderLimits = DEFAULT_RENDER_LIMITS) =>
  renderTemplate(c, variables, renderBudget(limits))

describe('render rules', () => {
  test('html escapes every output, text and subject print as given; raw opts out; escape is not doubled', () => {
    const c = compiled({ subject: 'Hi {{ v }}', html: '<p>{{ v }}|{{ v | raw }}|{{ v | escape }}|{% echo v %}</p>', text: '{{ v }}' })
    const v = `<script>"x"&'y'</script>`
    assert.deepEqual(render(c, { v }), {
      subject: `Hi ${v}`,
      html: '<p>&lt;script&gt;&#34;x&#34;&amp;&#39;y&#39;&lt;/script&gt;|' + v + '|&lt;script&gt;&#34;x&#34;&amp;&#39;y&#39;&lt;/script&gt;|&lt;script&gt;&#34;x&#34;&amp;&#39;y&#39;&lt;/script&gt;</p>',
      text: v,
    })
  })

  test('every missing variable is named; defaults fill in; if and default take an absent value', () => {
    const c = compiled({
      subject: '{{ a }}', text: '{{ b }} {{ c }} {% if maybe %}M{% endif %}{{ absent | default: "d" }} {{ f }}',
      variables: [{ name: 'f', default: 'F' }, { name: 'c' }],
    })
    assert.deepEqual(render(c, {}), { refused: { kind: 'variables', names: ['a', 'b', 'c'] } })
    assert.deepEqual(render(c, { a: 1, b: null, c: [1, 2] }), { subject: '1', html: null, text: ' 12 d F' })
    assert.deepEqual(render(compiled({ text: '{{ order.total }}' }), { order: {} }), { refused: { kind: 'variables', names: ['order.total'] } })
  })

  test('only own properties: a prototype is a missing variable, never a way out', () => {
    for (const text of ['{{ o.constructor }}', '{{ o.__proto__ }}', '{{ o.constructor.constructor }}', '{{ s.constructor.name }}']) {
      const r = render(compiled({ text }), { o: {}, s: 'str' })
      assert.ok('refused' in r && r.refused.kind === 'variables', `${text}: ${JSON.stringify(r)}`)
    }
  })

  test('no files, no other templates: include, render, layout and liquid do not parse', () => {
    for (const tag of ['{% include "/etc/passwd" %}', '{% render "x" %}', '{% layout "x" %}', '{% liquid echo 1 %}', '{% block b %}{% endblock %}']) {
      assert.match(refusedAtSave({ html: tag }), /^html: does not parse: tag "\w+" not found/)
    }
    assert.match(refusedAtSave({ text: '{{ a | nosuchfilter }}' }), /undefined filter: nosuchfilter/)
    assert.match(refusedAtSave({ html: '{% if a %}' }), /not closed/)
  })

  test('save bounds: sizes, the tag count (a linear scan, even of a hostile megabyte), nesting, declarations', () => {
    const megabyte = '{{'.repeat(512 * 1024)
    assert.equal(countTags(megabyte, TEMPLATE_LIMITS.tags), TEMPLATE_LIMITS.tags + 1, 'stops counting past the bound')
    assert.equal(countTags('{ {{ {% { %} }} {', 10), 2)
    assert.match(refusedAtSave({ html: '{{ a }}'.repeat(600), text: '{{ a }}'.repeat(401) }), /more than 1000 tags/)
    assert.match(refusedAtSave({ html: 'x'.repeat(TEMPLATE_LIMITS.bodyLength + 1) }), /^html: must be 1 to 262144 characters/)
    assert.match(refusedAtSave({ html: '{% if a %}'.repeat(21) + '{% endif %}'.repeat(21) }), /nests blocks more than 20 deep/)
    assert.doesNotThrow(() => compiled({ html: '{% if a %}'.repeat(20) + '{% endif %}'.repeat(20) }))
    assert.match(refusedAtSave({ subject: 'a\r\nb', text: 'x' }), /^subject: must not contain CR, LF/)
    assert.match(refusedAtSave({ text: 'x', variables: [{ name: 'a' }, { name: 'a' }] }), /variables\[1\]\.name: is declared twice/)
    assert.match(refusedAtSave({ text: 'x', variables: [{ name: '1a' }] }), /variables\[0\]\.name: must be a letter/)
    assert.match(refusedAtSave({}), /html or text is required/)
  })

  test('render bounds: memory, output, subject length, time, and the request\'s budget shared by its sends', () => {
    const range = render(compiled({ text: '{% for i in (1..1000000000) %}x{% endfor %}' }), {})
    assert.deepEqual(range, { refused: { kind: 'limit', part: 'text', message: 'rendering would make more than its memory bound allows' } })
    const doubling = render(compiled({ text: '{% assign s = "xxxxxxxx" %}{% for i in (1..40) %}{% assign s = s | append: s %}{% endfor %}{{ s }}' }), {})
    assert.ok('refused' in doubling && doubling.refused.kind === 'limit')

    const small: RenderLimits = { ...DEFAULT_RENDER_LIMITS, outputLength: 1000 }
    const output = render(compiled({ html: '{% for i in (1..100000) %}0123456789{% endfor %}' }), {}, small)
    assert.deepEqual(output, { refused: { kind: 'limit', part: 'html', message: 'the rendered html would pass 1000 characters' } })
    const subject = render(compiled({ subject: '{% for i in (1..1000) %}ab{% endfor %}', text: 'x' }), {})
    assert.deepEqual(subject, { refused: { kind: 'limit', part: 'subject', message: 'the rendered subject would pass 998 characters' } })

    const loops = compiled({ text: '{% for a in (1..1000) %}{% for b in (1..1000) %}{% for c in (1..1000) %}{% endfor %}{% endfor %}{% endfor %}' })
    const quick: RenderLimits = { ...DEFAULT_RENDER_LIMITS, sendMs: 5, requestMs: 10 }
    const timed = render(loops, {}, quick)
    assert.ok('refused' in timed && timed.refused.kind === 'limit' && /longer than its bound/.test(timed.refused.message), JSON.stringify(timed))

    // A request whose budget is spent renders nothing more, however small.
    const spent = renderBudget(quick, performance.now() - 1000)
    const tiny = renderTemplate(compiled({ text: '{{ a }}' }), { a: 1 }, spent)
    assert.ok('refused' in tiny && tiny.refused.kind === 'limit', JSON.stringify(tiny))
  })
})

describe('compiled versions', () => {
  test('the cache keeps the most recently used, bounded by entries and by source size', () => {
    const one = compiled({ text: 'x'.repeat(100) })
    const cache = new TemplateCache(2, 250)
    cache.set('a', 1, one)
    cache.set('b', 1, one)
    assert.equal(cache.get('a', 1), one, 'a is now the most recent')
    cache.set('c', 1, one)
    assert.equal(cache.get('b', 1), undefined, 'b was the least recently used')
    assert.equal(cache.get('a', 1), one)
    assert.equal(cache.size, 2)
    cache.set('a', 2, compiled({ text: 'y'.repeat(200) }))
    assert.equal(cache.size, 1, 'past the source bound the older entries go')
    cache.forget('a')
    assert.equal(cache.size, 0)
  })
})

/** A store with one template, counting its reads. */
function fakeStore (content: Pick<TemplateVersionRecord, 'subject' | 'html' | 'text' | 'variables'>) {
  const head: TemplateHead = { id: 'tpl_1', accountId: 'acct_1', name: 'hello', version: 1, createdAt: 'x', updatedAt: 'x' }
  const reads = { heads: 0, versions: 0 }
  const store = {
    async findTemplate (accountId: string, key: { id: string } | { name: string }) {
      reads.heads++
      return accountId === head.accountId && ('id' in key ? key.id === head.id : key.name === head.name) ? head : null
    },
    async findTemplateVersion (accountId: string, id: string, version: number) {
      reads.versions++
      return accountId === head.accountId && id === head.id && version === 1
        ? { templateId: head.id, accountId, version: 1, createdAt: 'x', ...content }
        : null
    },
  } as unknown as Store
  return { store, reads }
}

async function refusal (promise: Promise<unknown>): Promise<{ code: string; statusCode: number; paths: string[]; headers?: Record<string, string> }> {
  try {
    await promise
  } catch (err) {
    if (!isAppError(err)) throw err
    return { code: err.code, statusCode: err.statusCode, paths: (err.details ?? []).map((d) => d.path), ...(err.headers ? { headers: err.headers } : {}) }
  }
  throw new Error('expected a refusal')
}

describe('template sends', () => {
  const prefix = (i: number) => `body[${i}]`

  test('a batch reads and compiles its template once and renders each send with its own variables', async () => {
    const { store, reads } = fakeStore({ subject: 'Hi {{ n }}', html: null, text: 'n={{ n }}', variables: [] })
    const templates = createTemplateService({ store, clock: { now: () => 0 } })
    const items = Array.from({ length: 100 }, (_, n) => ({ to: 'a@example.com', template: { name: 'hello', variables: { n } } }))
    const out = await templates.renderSends('acct_1', items, prefix)
    assert.deepEqual(reads, { heads: 1, versions: 1 })
    assert.deepEqual(out.items[7], { to: 'a@example.com', subject: 'Hi 7', text: 'n=7' })
    assert.deepEqual(out.uses[99], { id: 'tpl_1', version: 1 })
    const plain = await templates.renderSends('acct_1', [{ subject: 's', text: 't' }], prefix)
    assert.deepEqual(plain.uses, [null], 'a batch without templates is left alone')
  })

  test('refusals: a malformed reference 400, fields beside a template 422, unknown 422, missing variables named per item', async () => {
    const { store } = fakeStore({ subject: 'Hi {{ who }}', html: null, text: 'x', variables: [] })
    const templates = createTemplateService({ store, clock: { now: () => 0 } })
    assert.deepEqual(await refusal(templates.renderSends('acct_1', [{ template: { id: 'tpl_1', name: 'hello' } }], prefix)),
      { code: 'validation_error', statusCode: 400, paths: ['body[0].template'] })
    assert.deepEqual(await refusal(templates.renderSends('acct_1', [{ subject: 's', html: 'h', template: { id: 'tpl_1' } }], prefix)),
      { code: 'template_invalid', statusCode: 422, paths: ['body[0].subject', 'body[0].html'] })
    assert.deepEqual(await refusal(templates.renderSends('acct_1', [{ template: { name: 'nope' } }, { template: { id: 'tpl_1', version: 2 } }], prefix)),
      { code: 'template_not_found', statusCode: 422, paths: ['body[0].template.name', 'body[1].template.version'] })
    assert.deepEqual(await refusal(templates.renderSends('acct_2', [{ template: { id: 'tpl_1' } }], prefix)),
      { code: 'template_not_found', statusCode: 422, paths: ['body[0].template.id'] }, 'another account\'s template is unknown')
    assert.deepEqual(await refusal(templates.renderSends('acct_1', [{ template: { id: 'tpl_1', variables: { who: 'ok' } } }, { template: { id: 'tpl_1' } }, { template: { id: 'tpl_1', variables: { who: 'a\nb' } } }], prefix)),
      { code: 'template_invalid', statusCode: 422, paths: ['body[1].template.variables.who', 'body[2].template.variables.who'] })

    const { store: emptyStore } = fakeStore({ subject: 's', html: '{% if on %}<p>on</p>{% endif %}', text: null, variables: [] })
    const empties = createTemplateService({ store: emptyStore, clock: { now: () => 0 } })
    assert.deepEqual(await refusal(empties.renderSends('acct_1', [{ template: { id: 'tpl_1', variables: { on: false } } }], prefix)),
      { code: 'template_invalid', statusCode: 422, paths: ['body[0].template'] }, 'a send that renders to nothing')
  })

  test('each account has render time that refills: past it, 429 before any render', async () => {
    const { store } = fakeStore({ subject: 's', html: null, text: '{{ a }}', variables: [] })
    let now = 0
    let stopwatch = 0
    // Every request "renders" for 300 ms on this stopwatch (read at its start and its end).
    const elapsed = () => { stopwatch += 300; return stopwatch }
    const templates = createTemplateService({ store, clock: { now: () => now }, elapsed, allowance: { perSecondMs: 100, burstMs: 1000 } })
    const send = (account = 'acct_1') => templates.renderSends(account, [{ template: { id: 'tpl_1', variables: { a: 1 } } }], prefix)
    for (let i = 0; i < 4; i++) assert.ok((await send()).uses[0], 'while time is left a request renders: 1000 → 700 → 400 → 100 → -200 ms')
    const limited = await refusal(send())
    assert.deepEqual(limited, { code: 'rate_limited', statusCode: 429, paths: [], headers: { 'retry-after': '3' } })
    assert.deepEqual(await refusal(templates.preview('acct_1', 'tpl_1', { variables: { a: 1 } })), limited)
    now += 3_000
    assert.ok((await send()).uses[0], 'refilled at 100 ms a second')
  })
})
