// What an operator gets in production without reading further: /metrics is never public. Real server on
// a real socket and SQLite file, for the API process and for a process without the api role.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { errorOf, startServer } from '../helpers/server.js'

const TOKEN = 'metrics-token-0123456789abcdef'

describe('/metrics in production', () => {
  for (const roles of ['api,mailer,delivery', 'mailer,delivery']) {
    test(`without METRICS_TOKEN it is not served: 404, with and without a bearer token (SVC_ROLES=${roles})`, async (t) => {
      const server = await startServer(t, { env: { NODE_ENV: 'production', SVC_ROLES: roles } })
      for (const headers of [{} as Record<string, string>, { authorization: 'Bearer ' }, { authorization: `Bearer ${TOKEN}` }]) {
        const res = await server.client().get('/metrics', headers)
        assert.equal(res.status, 404, res.text)
        assert.equal(errorOf(res).code, 'not_found')
        assert.doesNotMatch(res.text, /svc_|process_/)
      }
      assert.equal((await server.client().get('/healthz')).status, 200, 'the process itself serves')
    })

    test(`with METRICS_TOKEN it answers the bearer token only (SVC_ROLES=${roles})`, async (t) => {
      const server = await startServer(t, { env: { NODE_ENV: 'production', SVC_ROLES: roles, METRICS_TOKEN: TOKEN } })
      for (const headers of [{} as Record<string, string>, { authorization: 'Bearer wrong-token-0123456789' }, { authorization: TOKEN }]) {
        const res = await server.client().get('/metrics', headers)
        assert.equal(res.status, 401)
        assert.equal(errorOf(res).code, 'authentication_required')
      }
      const ok = await server.client().get('/metrics', { authorization: `Bearer ${TOKEN}` })
      assert.equal(ok.status, 200)
      assert.match(ok.text, /^svc_http_request_duration_seconds_count\{/m)
    })
  }
})
