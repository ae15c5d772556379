// TRUST_PROXY as Fastify takes it. A number of hops becomes a function (Fastify's types take none):
// the address `hop` steps back from the socket is a proxy's while hop < n, so the client address is the
// one the outermost trusted proxy appended, whatever the client wrote further left.
import type { Config } from '../../config/index.js'

export function fastifyTrustProxy (setting: Config['trustProxy']): false | string[] | ((address: string, hop: number) => boolean) {
  if (typeof setting === 'number') return (_address, hop) => hop < setting
  return setting
}
