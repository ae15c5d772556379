// The one rule of what an API key's permission allows (src/domain/api-key-permissions.ts).
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { API_KEY_PERMISSIONS, DEFAULT_API_KEY_PERMISSION, mayCreateKey, permissionAllows, requirePermission } from '../../src/app/api-keys.js'

test('full_access may send and manage; sending_access may only send', () => {
  assert.deepEqual([...API_KEY_PERMISSIONS], ['full_access', 'sending_access'])
  assert.equal(DEFAULT_API_KEY_PERMISSION, 'full_access')
  assert.equal(permissionAllows('full_access', 'send'), true)
  assert.equal(permissionAllows('full_access', 'manage'), true)
  assert.equal(permissionAllows('sending_access', 'send'), true)
  assert.equal(permissionAllows('sending_access', 'manage'), false)
})

test('a permission this version does not know allows nothing (a store value is never trusted blindly)', () => {
  for (const odd of ['', 'admin', 'FULL_ACCESS', '__proto__', 'constructor', 'toString']) {
    assert.equal(permissionAllows(odd, 'send'), false, odd)
    assert.equal(permissionAllows(odd, 'manage'), false, odd)
  }
})

test('a key creates keys up to its own permission: full creates either, sending none', () => {
  assert.equal(mayCreateKey('full_access', 'full_access'), true)
  assert.equal(mayCreateKey('full_access', 'sending_access'), true)
  assert.equal(mayCreateKey('sending_access', 'sending_access'), false)
  assert.equal(mayCreateKey('sending_access', 'full_access'), false)
  assert.equal(mayCreateKey('admin', 'sending_access'), false)
})

test('requirePermission throws 403 insufficient_permission', () => {
  assert.throws(() => requirePermission('sending_access', 'manage'), (err: any) => err.code === 'insufficient_permission' && err.statusCode === 403)
  assert.doesNotThrow(() => requirePermission('sending_access', 'send'))
})
