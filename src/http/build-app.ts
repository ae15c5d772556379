// The HTTP side of a process, built around services made elsewhere (src/app/services.ts, by src/service.ts):
// buildApp, the API with every plugin and route registered, and buildOperationsApp, health and metrics
// only, for a process without the API role. Neither calls listen(): src/server.ts does.
import cookie from '@fastify/cookie'
import rateLimit from '@fastify/rate-limit'
import swagger from '@fastify/swagger'
import swaggerUi from '@fastify/swagger-ui'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type preValidationAsyncHookHandler } from 'fastify'
import { readFileSync } from 'node:fs'
import type { Registry } from 'prom-client'
import type { Config } from '../../config/index.js'
import type { Services } from '../app/services.js'
import { RateLimited, ValidationError } from '../errors.js'
import type { Store } from '../store/types.js'
import { registerDashboard } from './dashboard.js'
import { registerAccountLimits } from './account-limits.js'
import { registerErrorHandling } from './errors.js'
import { clientErrorHandler, frameworkErrorHandler } from './framework-errors.js'
import { bodyText, parseJsonBody } from './json.js'
import { loggedPath } from './logging.js'
import { fastifyTrustProxy } from './trust-proxy.js'
import { newRequestId } from './request-id.js'
import { BODY_LIMITS, addSharedSchemas, withStandardErrors } from './schemas.js'
import { registerHttpMetrics } from './metrics.js'
import { sharedRateLimitStore } from './rate-limit-store.js'
import { buildCachedSerializer } from './serializers.js'
import { validatorCompiler } from './validation.js'
import type { RouteContext } from './routes/context.js'
import accountRoutes from './routes/auth/index.js'
import deliveryRoutes from './routes/deliveries/index.js'
import domainRoutes from './routes/domains/index.js'
import emailListRoutes from './routes/email-list/index.js'
import emailRoutes from './routes/emails/index.js'
import healthRoutes from './routes/health.js'
import keyRoutes from './routes/keys/index.js'
import receivedRoutes from './routes/received/index.js'
import statsRoutes from './routes/stats/index.js'
import suppressionRoutes from './routes/suppressions/index.js'
import templateRoutes from './routes/templates/index.js'
import trackingRoutes from './routes/tracking/index.js'
import webhookRoutes from './routes/webhooks/index.js'

export interface HttpDeps {
  /** The store, for the rate limits' shared counters (RATE_LIMIT_STORE=store). */
  store: Store
  /** Where metrics register. */
  registry: Registry
  /** A pino logger; default: none (silent). The server passes its own. */
  logger?: FastifyBaseLogger
}

export type App = FastifyInstance & { services: Services; registry: Registry }

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/

// Routes without a body schema take no body: none, or an empty JSON object (what many clients send).
const refuseBody: preValidationAsyncHookHandler = async (request) => {
  const body = request.body
  if (body === undefined) return
  if (typeof body === 'object' && body !== null && !Array.isArray(body) && Object.keys(body).length === 0) return
  throw ValidationError('This route takes no request body', [{ path: 'body', message: 'must be absent (or {}): this route takes no body' }])
}

type Header = Record<string, unknown>
type Operation = {
  operationId?: string
  summary?: string
  description?: string
  parameters?: Array<{ in: string; required?: boolean; schema?: { default?: unknown } }>
  requestBody?: { required?: boolean; content?: Record<string, { schema?: { required?: string[]; minProperties?: number; type?: string } }> }
  responses?: Record<string, { content?: unknown; headers?: Record<string, Header> }>
}
interface OpenApiDocument { paths?: Record<string, Record<string, Operation>> }

const REQUEST_ID_HEADER = { 'x-request-id': { required: true, schema: { type: 'string' }, description: 'this request\'s id (the one given, when it is well formed), as the server log names it' } }
// RateLimit draft headers (@fastify/rate-limit's enableDraftSpec, and the per-caller limits of the API).
const RATE_LIMIT_HEADERS = {
  'ratelimit-limit': { schema: { type: 'integer' }, description: 'requests allowed in the window' },
  'ratelimit-remaining': { schema: { type: 'integer' }, description: 'requests left in the window' },
  'ratelimit-reset': { schema: { type: 'integer' }, description: 'seconds until the window resets' },
}

/**
 * The document as tools want it: a body whose every field is optional may be left out
 * (src/http/validation.ts), so it is not `required`, nor is a query parameter with a default; every
 * answer declares x-request-id, and the answers of a rate-limited operation (one that may answer 429) the
 * RateLimit headers; a HEAD operation (every GET has one: exposeHeadRoutes below) is named like its GET with `Head` (Fastify
 * would say `…-head`) and answers headers only.
 */
function finishDocument (doc: OpenApiDocument): OpenApiDocument {
  for (const ops of Object.values(doc.paths ?? {})) {
    for (const [method, op] of Object.entries(ops)) {
      const schema = op.requestBody?.content?.['application/json']?.schema
      if (schema?.type === 'object' && (schema.required ?? []).length === 0 && !schema.minProperties) op.requestBody!.required = false
      for (const p of op.parameters ?? []) if (p.in === 'query' && p.schema?.default !== undefined) p.required = false
      const limited = op.responses?.['429'] !== undefined
      for (const [status, response] of Object.entries(op.responses ?? {})) {
        const rated = limited && (status.startsWith('2') || status === '429')
        response.headers = { ...REQUEST_ID_HEADER, ...(rated ? RATE_LIMIT_HEADERS : {}), ...response.headers }
      }
      if (method === 'head') {
        if (op.operationId !== undefined) op.operationId = op.operationId.replace(/-head$/, 'Head')
        op.description = 'The same answer as GET, headers only; nothing is recorded.'
        for (const response of Object.values(op.responses ?? {})) delete response.content
      }
    }
  }
  return doc
}

/** The name, version and licence of this package (package.json: one source for the document too). */
const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { name: string; version: string; license?: string }

export async function buildApp (config: Config, services: Services, deps: HttpDeps): Promise<App> {
  const { registry } = deps

  const app = Fastify({
    ...(deps.logger ? { loggerInstance: deps.logger } : { logger: false }),
    // Each route has its own body limit (the onRoute hook below); this one is for paths without a route.
    bodyLimit: BODY_LIMITS.none,
    // Errors before routing are envelopes too: a URL that does not decode, a request Node cannot parse.
    frameworkErrors: frameworkErrorHandler,
    clientErrorHandler,
    trustProxy: fastifyTrustProxy(config.trustProxy),
    // One log line per request (onResponse below) instead of Fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
    requestIdHeader: false,
    genReqId: (req) => {
      const given = req.headers['x-request-id']
      if (typeof given === 'string' && REQUEST_ID.test(given)) return given
      return newRequestId()
    },
    // Tracking tokens travel in the path (/t/c/<token>), and a click token carries its whole link.
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 8192 },
    // Response serializers compiled once per process, whatever the number of apps (./serializers.ts).
    schemaController: { compilersFactory: { buildSerializer: buildCachedSerializer } },
    // A request must arrive whole, body included, within HTTP_REQUEST_TIMEOUT_SECONDS (Fastify's own
    // default is no limit: a client declaring a body it never sends would hold its connection for good);
    // past it Node answers 408 (the envelope, src/http/framework-errors.ts) and closes. Node looks for
    // such requests every connectionsCheckingInterval: a quarter of the limit, at most its 30 s default.
    // Given twice on purpose: Node takes it (and the headers' limit from it) at construction, and Fastify
    // sets the server's own afterwards, where its default 0 would switch it off again.
    requestTimeout: config.requestTimeoutMs,
    http: { requestTimeout: config.requestTimeoutMs, connectionsCheckingInterval: Math.max(50, Math.min(30_000, Math.floor(config.requestTimeoutMs / 4))) },
  }).withTypeProvider<TypeBoxTypeProvider>()

  app.setValidatorCompiler(validatorCompiler)
  // Every error answer is this envelope: one shared schema, `#/components/schemas/ErrorEnvelope` in the document.
  addSharedSchemas(app)
  // Every route's body limit is as small as it needs (routes that take a body set theirs, or get the
  // default); a route without a body schema takes no body.
  app.addHook('onRoute', (route) => {
    // The errors every route of its kind can answer, in its schema: in the OpenAPI document, and serialized.
    withStandardErrors(route)
    const hasBody = route.schema?.body !== undefined
    route.bodyLimit ??= hasBody ? BODY_LIMITS.default : BODY_LIMITS.none
    if (!hasBody) {
      const own = route.preValidation
      route.preValidation = own === undefined ? [refuseBody] : [refuseBody, ...(Array.isArray(own) ? own : [own])]
    }
  })
  app.decorateRequest('account', null)
  app.decorateRequest('sessionTokenHash', null)
  app.decorateRequest('apiKey', null)

  // JSON only. Fastify's text/plain parser goes, so any other body type is 415; an empty JSON body is
  // "no body" (DELETE with a Content-Type header); nesting is bounded before parsing, and __proto__ keys
  // are refused outright (src/http/json.ts).
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_req, body, done) => {
    try {
      done(null, parseJsonBody(bodyText(body as Buffer)))
    } catch (err) {
      done(err as Error, undefined)
    }
  })

  // HSTS where svc is served over https (PUBLIC_URL): browsers never try it over plain http again.
  const https = config.publicUrl.startsWith('https:')
  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id)
    if (https) reply.header('strict-transport-security', 'max-age=31536000')
  })
  // Paths are logged without tokens or addresses: /t/c/:token, /api/suppressions/:email (src/http/logging.ts).
  app.addHook('onResponse', async (request, reply) => {
    request.log.info({
      method: request.method,
      path: loggedPath(request),
      route: request.routeOptions.url,
      status: reply.statusCode,
      ms: Math.round(reply.elapsedTime * 100) / 100,
    }, 'request')
  })

  // First, so that the document sees every route registered after it (its onRoute hook), /metrics too.
  await app.register(swagger, {
    // Every GET also answers HEAD (Fastify): the document says so, operation by operation.
    exposeHeadRoutes: true,
    transformObject: (documentObject) => finishDocument((documentObject as { openapiObject: OpenApiDocument }).openapiObject) as object,
    // Shared schemas keep their $id as their name in components.schemas (ErrorEnvelope), not def-0.
    refResolver: { buildLocalReference: (json, _baseUri, _fragment, i) => typeof json.$id === 'string' ? json.$id : `def-${i}` },
    openapi: {
      info: {
        title: 'svc',
        version: pkg.version,
        description: 'Email sending API with signed webhooks. Every answer carries an x-request-id; every error is the ErrorEnvelope. ' +
          'A method a path does not take answers 405 with an Allow header; every GET also answers HEAD (headers only), declared as its own operation.',
        license: { name: pkg.license ?? 'UNLICENSED', ...(pkg.license === 'MIT' ? { url: 'https://opensource.org/licenses/MIT' } : {}) },
      },
      servers: [{ url: config.publicUrl, description: 'PUBLIC_URL' }],
      tags: [
        { name: 'accounts', description: 'Sign up, log in (the svc_session cookie), the account and its plan' },
        { name: 'api keys', description: 'Keys for programs (x-api-key), shown once at creation' },
        { name: 'sending', description: 'Send email with an API key' },
        { name: 'emails', description: 'Sent emails, their timelines and statistics' },
        { name: 'webhooks', description: 'Signed event deliveries to your endpoints' },
        { name: 'deliveries', description: 'The delivery log of a webhook: retry, test, recover' },
        { name: 'suppressions', description: 'Addresses that are never sent to' },
        { name: 'received', description: 'Mail received at your domains with receiving on: parsed, raw, attachments' },
        { name: 'templates', description: 'Stored templates (Liquid) with their versions; a send names one in place of subject, html and text' },
        { name: 'tracking', description: 'The links inside sent emails: open pixel, tracked clicks, unsubscribe' },
        { name: 'operations', description: 'Health, readiness, metrics and this document' },
      ],
      components: {
        securitySchemes: {
          session: { type: 'apiKey', in: 'cookie', name: 'svc_session', description: 'Set by signup and login; browsers only (same origin as PUBLIC_URL)' },
          apiKey: { type: 'apiKey', in: 'header', name: 'x-api-key', description: 'An API key (POST /api/keys)' },
          metricsToken: { type: 'http', scheme: 'bearer', description: 'METRICS_TOKEN, when the operator set one' },
        },
      },
    },
  })
  registerErrorHandling(app)
  registerHttpMetrics(app, registry, config.metricsToken, config.metricsServed)

  await app.register(cookie)
  await app.register(rateLimit, {
    // RATE_LIMIT_STORE=store: counters in the store, shared by every node; memory: this process's own.
    ...(config.rateLimitStore === 'store'
      ? { store: sharedRateLimitStore(deps.store, services.clock, (err) => app.log.warn({ err }, 'pruning rate-limit windows failed')) }
      : {}),
    global: false,
    enableDraftSpec: true,
    errorResponseBuilder: (_request, context) =>
      RateLimited(`Too many requests; retry in ${Math.ceil(context.ttl / 1000)} s`, undefined, { 'retry-after': String(Math.ceil(context.ttl / 1000)) }),
  })
  registerAccountLimits(app, config.rateLimits)
  // /docs under a Content-Security-Policy of its own (Swagger UI's static one, with the hashes of its inline
  // parts): nothing from another origin runs there. upgrade-insecure-requests only where svc is https.
  await app.register(swaggerUi, {
    routePrefix: '/docs',
    staticCSP: true,
    transformStaticCSP: (header) => https ? header : header.replace(/\s*upgrade-insecure-requests;?/, ''),
  })

  app.get('/openapi.json', {
    schema: {
      operationId: 'getOpenApiDocument', tags: ['operations'], summary: 'This document (OpenAPI 3)', security: [],
      response: { 200: { description: 'The OpenAPI document', type: 'object', additionalProperties: true } },
      omitErrors: [503],
    },
  }, async () => app.swagger() as unknown as Record<string, unknown>)

  const context: RouteContext = { services, config, registry }
  await app.register(healthRoutes, context)
  await app.register(accountRoutes, context)
  await app.register(keyRoutes, context)
  await app.register(webhookRoutes, context)
  await app.register(deliveryRoutes, context)
  await app.register(emailRoutes, context)
  await app.register(emailListRoutes, context)
  await app.register(statsRoutes, context)
  await app.register(suppressionRoutes, context)
  await app.register(trackingRoutes, context)
  await app.register(domainRoutes, context)
  await app.register(receivedRoutes, context)
  await app.register(templateRoutes, context)
  // The dashboard's static files at / (web/), under their own Content-Security-Policy.
  registerDashboard(app)

  app.addHook('onClose', async () => {
    // Best effort, like every usage write: a store that cannot write (disk full) must not fail the stop.
    await services.apiKeys.flushUsage().catch((err) => app.log.warn({ err }, 'could not record API key usage while stopping'))
  })

  return Object.assign(app, { services, registry })
}

/**
 * The HTTP side of a process without the API role: /healthz, /readyz and /metrics on its PORT (operators
 * scrape every node), every other path the 404 envelope. A separate, minimal app rather than the API app
 * with its routes left out: nothing of the API (body parsers, sessions, rate limits, docs) is loaded,
 * and nothing of it can be reached by mistake.
 */
export async function buildOperationsApp (config: Config, services: Services, deps: Omit<HttpDeps, 'store'>): Promise<App> {
  const app = Fastify({
    ...(deps.logger ? { loggerInstance: deps.logger } : { logger: false }),
    bodyLimit: 1024,
    trustProxy: fastifyTrustProxy(config.trustProxy),
  })
  addSharedSchemas(app)
  registerErrorHandling(app)
  registerHttpMetrics(app, deps.registry, config.metricsToken, config.metricsServed)
  await app.register(healthRoutes, { services, config, registry: deps.registry })
  const built: App = Object.assign(app, { services, registry: deps.registry })
  return built
}
