// Application-made ids (src/domain/ids.ts).
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { deliveryId } from '../../src/domain/ids.js'

test('a delivery id is the same for the same event and webhook in every version, so routing an event again after an upgrade makes no second delivery', () => {
  // Pinned: the value ids made by earlier versions carry (the event's time digits, then 16 hex digits of SHA-256 of "event:webhook").
  assert.equal(deliveryId('evt_0193a1b2c3d4e5f60718293a4b5c', 'wh_0193a1b2c3d4f00112233445566'), 'dlv_0193a1b2c3d45f6c5ad34120779a')
  assert.notEqual(deliveryId('evt_0193a1b2c3d4e5f60718293a4b5c', 'wh_0193a1b2c3d4f00112233445567'), 'dlv_0193a1b2c3d45f6c5ad34120779a')
})
