// A sender: an account with a session (for the cookie routes) and an API key (for the sending routes).
import type { Client, Response, TestServer } from './server.js'
import { signedUp } from './server.js'
import { waitFor } from './wait.js'

export interface Sender {
  client: Client
  accountId: string
  key: string
  send(body: unknown, headers?: Record<string, string>): Promise<Response>
  batch(body: unknown, headers?: Record<string, string>): Promise<Response>
  email(id: string): Promise<Response>
  /** Polls GET /api/emails/:id until its status is final (or `status` when given). */
  settled(id: string, status?: string): Promise<any>
}

const FINAL = new Set(['delivered', 'bounced', 'partially_delivered', 'failed'])

export async function sender (server: Pick<TestServer, 'client'> & Partial<TestServer>, client?: Client): Promise<Sender> {
  const c = client ?? (await signedUp(server as TestServer)).client
  const me = await c.get('/api/account')
  const created = await c.post('/api/keys', { name: 'sending' })
  if (created.status !== 201) throw new Error(`key creation failed: ${created.status} ${created.text}`)
  const key: string = created.body.data.key
  const api = server.client()
  const withKey = (headers?: Record<string, string>) => ({ 'x-api-key': key, ...headers })
  const s: Sender = {
    client: c,
    accountId: me.body.data.id,
    key,
    send: (body, headers) => api.post('/api/send', body, withKey(headers)),
    batch: (body, headers) => api.post('/api/send/batch', body, withKey(headers)),
    email: (id) => api.get(`/api/emails/${id}`, withKey()),
    settled: async (id, status) => {
      let seen = 'nothing yet'
      return await waitFor(() => `email ${id} to be ${status ?? 'final'} (it is ${seen})`, async () => {
        const res = await s.email(id)
        if (res.status !== 200) throw new Error(`GET /api/emails/${id}: ${res.status} ${res.text}`)
        const data = res.body.data
        seen = data.status
        return (status === undefined ? FINAL.has(data.status) : data.status === status) ? data : false
      })
    },
  }
  return s
}

/** The event types of an email's timeline, in order. */
export function timeline (email: { events: Array<{ type: string; recipient: string }> }): string[] {
  return email.events.map((e) => `${e.type} ${e.recipient}`)
}

/**
 * `count` sends in batches of 100 (POST /api/send/batch bodies): one reader each (reader<n>@example.net),
 * from `from`, with a link of its own in the html and a text part, as a newsletter run would send them.
 */
export function readerBatches (count: number, from: string): Array<Array<Record<string, string>>> {
  const batches: Array<Array<Record<string, string>>> = []
  for (let start = 0; start < count; start += 100) {
    batches.push(Array.from({ length: Math.min(100, count - start) }, (_, j) => ({
      from, to: `reader${start + j}@example.net`, subject: `Hello ${start + j}`,
      html: `<p>Hello <a href="https://shop.example.com/p/${start + j}">there</a></p>`, text: `Hello ${start + j}`,
    })))
  }
  return batches
}
