import assert from 'node:assert/strict'
import { test } from 'node:test'
import fastJsonStringify from 'fast-json-stringify'
import { buildCachedSerializer } from '../../src/http/serializers.js'

const shared = { Thing: { $id: 'Thing', type: 'object', properties: { id: { type: 'string' }, n: { type: 'integer' } } } }
const route = { method: 'GET', url: '/x', httpStatus: '200' }
const schema = { type: 'object', properties: { success: { type: 'boolean' }, data: { $ref: 'Thing#' } } }

test('a response schema is compiled once per process: a second app with the same shared schemas gets the same serializer', () => {
  const first = buildCachedSerializer(shared, {})({ ...route, schema })
  // Another app: its own copies of the same schemas (equal text, other objects).
  const second = buildCachedSerializer(structuredClone(shared), {})({ ...route, schema: structuredClone(schema) })
  assert.equal(second, first)
  const data = { success: true, data: { id: 'a', n: 2, secret: 'never serialized' }, extra: 1 }
  assert.equal(first(data), fastJsonStringify(schema as never, { schema: shared as never })(data))
  assert.equal(first(data), '{"success":true,"data":{"id":"a","n":2}}')
})

test('other shared schemas, or another schema, get their own serializer', () => {
  const base = buildCachedSerializer(shared, {})({ ...route, schema })
  const otherShared = { Thing: { $id: 'Thing', type: 'object', properties: { id: { type: 'string' } } } }
  const other = buildCachedSerializer(otherShared, {})({ ...route, schema })
  assert.notEqual(other, base)
  assert.equal(other({ data: { id: 'a', n: 2 } }), '{"data":{"id":"a"}}')
  const plain = buildCachedSerializer(shared, {})({ ...route, schema: { type: 'object', properties: { ok: { type: 'boolean' } } } })
  assert.notEqual(plain, base)
  assert.equal(plain({ ok: true, success: true }), '{"ok":true}')
})

test('a shared schema serialized on its own is not handed to itself as external', () => {
  const own = buildCachedSerializer(shared, {})({ ...route, schema: shared.Thing })
  assert.equal(own({ id: 'b', n: 3 }), '{"id":"b","n":3}')
})
