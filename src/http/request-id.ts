// Request ids: unique, not unguessable. A per-process random prefix and a counter, so that no request
// pays for a call into the CSPRNG. Every answer carries one, the ones Node's parser refuses included.
import { randomBytes } from 'node:crypto'

const prefix = randomBytes(6).toString('hex')
let count = 0

export function newRequestId (): string {
  count = (count + 1) % 0x1000000000000
  return `req_${prefix}${count.toString(16).padStart(12, '0')}`
}
