// The bare route: Fastify with the same TypeBox schema (and the same validator compiler) as
// POST /api/send, and no work: no auth, no store, a fixed 202. In its own process, like svc.
import Fastify from 'fastify'
import { SendRoute } from '../../src/http/routes/emails/schema.js'
import { addSharedSchemas } from '../../src/http/schemas.js'
import { validatorCompiler } from '../../src/http/validation.js'
import { serve } from '../lib/procs.js'

const ANSWER = JSON.stringify({ success: true, data: { id: 'em_000000000000000000000000000' }, message: 'Email accepted for delivery' })

// No type provider: the answer is a fixed string, as svc's own route sends its stored JSON text.
const app = Fastify({ logger: false })
app.setValidatorCompiler(validatorCompiler)
// The route's declared error answers refer to the shared error envelope, as in svc.
addSharedSchemas(app)
app.post('/api/send', { schema: SendRoute }, async (_request, reply) => reply.code(202).type('application/json; charset=utf-8').send(ANSWER))

await app.listen({ port: 0, host: '127.0.0.1' })
const { port } = app.server.address() as { port: number }
serve(async (msg) => {
  if (msg.type === 'info') return { port }
  if (msg.type === 'stop') {
    await app.close()
    setImmediate(() => process.exit(0))
    return {}
  }
  throw new Error(`unknown message ${msg.type}`)
})
