// The container's HEALTHCHECK: exit 0 when this process's GET /readyz answers 200 (the store can be
// read and written, and each role it runs is up), 1 otherwise. Every role serves /readyz, so one check
// fits the API container and the mailer + delivery one. Plain Node, no curl in the slim image.
const host = process.env.HOST === undefined || ['0.0.0.0', '::', '[::]', ''].includes(process.env.HOST)
  ? '127.0.0.1'
  : process.env.HOST.includes(':') && !process.env.HOST.startsWith('[') ? `[${process.env.HOST}]` : process.env.HOST
const port = process.env.PORT || '3000'
try {
  const res = await fetch(`http://${host}:${port}/readyz`, { signal: AbortSignal.timeout(4000) })
  if (res.status !== 200) process.stderr.write(`readyz: ${res.status} ${(await res.text()).slice(0, 500)}\n`)
  process.exit(res.status === 200 ? 0 : 1)
} catch (err) {
  process.stderr.write(`readyz: ${err instanceof Error ? err.message : String(err)}\n`)
  process.exit(1)
}
