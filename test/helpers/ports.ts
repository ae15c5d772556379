// A loopback port for a server the test starts later (PUBLIC_URL naming it, a relay named before it runs).
import { createServer } from 'node:net'

/** A TCP port free on 127.0.0.1 right now: bound by the kernel's choice, read, and let go at once. */
export function freePort (): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolve(port))
    })
  })
}
