// buildApp(config, deps): the Fastify instance with every plugin and route registered, and no listen().
// Tests build it around a real store; src/server.ts builds it and listens.
import cookie from '@fastify/cookie'
import rateLimit from '@fastify/rate-limit'
import swagger from '@fastify/swagger'
import swaggerUi from '@fastify/swagger-ui'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type preValidationAsyncHookHandler } from 'fastify'
import { Registry } from 'prom-client'
import type { Config } from '../config/index.js'
import { createAccountService } from './domain/accounts.js'
import { createApiKeyService } from './domain/api-keys.js'
import { systemClock, type Clock } from './domain/clock.js'
import { createDeliveryService } from './domain/deliveries.js'
import { createEmailService } from './domain/emails.js'
import { createSuppressionService } from './domain/suppressions.js'
import { createWebhookService } from './domain/webhooks.js'
import { parseCidrList, systemResolver, type Resolver } from './domain/webhook-url.js'
import { RateLimited, ValidationError } from './errors.js'
import { registerDashboard } from './http/dashboard.js'
import { registerErrorHandling } from './http/errors.js'
import { clientErrorHandler, frameworkErrorHandler } from './http/framework-errors.js'
import { parseJsonBody } from './http/json.js'
import { loggedPath } from './http/logging.js'
import { newRequestId } from './http/request-id.js'
import { BODY_LIMITS } from './http/schemas.js'
import { registerHttpMetrics } from './http/metrics.js'
import accountRoutes from './http/routes/auth/index.js'
import type { RouteContext, Services } from './http/routes/context.js'
import healthRoutes from './http/routes/health.js'
import keyRoutes from './http/routes/keys/index.js'
import webhookRoutes from './http/routes/webhooks/index.js'
import emailRoutes from './http/routes/emails/index.js'
import suppressionRoutes from './http/routes/suppressions/index.js'
import trackingRoutes from './http/routes/tracking/index.js'
import deliveryRoutes from './http/routes/deliveries/index.js'
import { sharedRateLimitStore } from './http/rate-limit-store.js'
import emailListRoutes from './http/routes/email-list/index.js'
import statsRoutes from './http/routes/stats/index.js'
import { validatorCompiler } from './http/validation.js'
import type { Store } from './store/types.js'

export interface AppDeps {
  store: Store
  /** A pino logger; default: none (silent). The server passes its own. */
  logger?: FastifyBaseLogger
  /** Where metrics register; default: a fresh Registry. */
  registry?: Registry
  /** DNS for the webhook URL guard; tests inject one and never touch public DNS. */
  resolver?: Resolver
  clock?: Clock
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

export function createServices (config: Config, deps: AppDeps): Services {
  if (config.secret === undefined) throw new Error('config.secret must be resolved before building the app')
  const clock = deps.clock ?? systemClock
  const { store } = deps
  const webhooks = createWebhookService({
    store,
    clock,
    urlPolicy: { production: config.production, allowedCidrs: parseCidrList(config.webhookAllowedCidrs) },
    resolver: deps.resolver ?? systemResolver,
  })
  return {
    store,
    accounts: createAccountService({ store, secret: config.secret, clock, sessionTtlMs: config.sessionTtlMs }),
    apiKeys: createApiKeyService({ store, secret: config.secret, clock }),
    webhooks,
    emails: createEmailService({ store, clock, mailFrom: config.mailFrom }),
    suppressions: createSuppressionService({ store, clock }),
    readiness: new Map(),
    deliveries: createDeliveryService({
      store, clock, webhooks, onBackgroundError: (err) => deps.logger?.error({ err }, 'recovering deliveries failed'),
    }),
  }
}

interface OpenApiDocument { paths?: Record<string, Record<string, { requestBody?: { required?: boolean; content?: Record<string, { schema?: { required?: string[]; minProperties?: number; type?: string } }> } }>> }

function markOptionalBodies (doc: OpenApiDocument): OpenApiDocument {
  for (const ops of Object.values(doc.paths ?? {})) {
    for (const op of Object.values(ops)) {
      const schema = op.requestBody?.content?.['application/json']?.schema
      if (schema?.type === 'object' && (schema.required ?? []).length === 0 && !schema.minProperties) op.requestBody!.required = false
    }
  }
  return doc
}

export async function buildApp (config: Config, deps: AppDeps): Promise<App> {
  const services = createServices(config, deps)
  const registry = deps.registry ?? new Registry()

  const app = Fastify({
    ...(deps.logger ? { loggerInstance: deps.logger } : { logger: false }),
    // Each route has its own body limit (the onRoute hook below); this one is for paths without a route.
    bodyLimit: BODY_LIMITS.none,
    // Errors before routing are envelopes too: a URL that does not decode, a request Node cannot parse.
    frameworkErrors: frameworkErrorHandler,
    clientErrorHandler,
    trustProxy: config.trustProxy,
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
  }).withTypeProvider<TypeBoxTypeProvider>()

  app.setValidatorCompiler(validatorCompiler)
  // Every route's body limit is as small as it needs (routes that take a body set theirs, or get the
  // default); a route without a body schema takes no body.
  app.addHook('onRoute', (route) => {
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
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => {
    try {
      done(null, parseJsonBody(body as string))
    } catch (err) {
      done(err as Error, undefined)
    }
  })

  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id)
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

  registerErrorHandling(app)
  registerHttpMetrics(app, registry, config.metricsToken)

  await app.register(cookie)
  await app.register(rateLimit, {
    // RATE_LIMIT_STORE=store: counters in the store, shared by every node; memory: this process's own.
    ...(config.rateLimitStore === 'store'
      ? { store: sharedRateLimitStore(services.store, deps.clock ?? systemClock, (err) => app.log.warn({ err }, 'pruning rate-limit windows failed')) }
      : {}),
    global: false,
    enableDraftSpec: true,
    errorResponseBuilder: (_request, context) =>
      RateLimited(`Too many requests; retry in ${Math.ceil(context.ttl / 1000)} s`, undefined, { 'retry-after': String(Math.ceil(context.ttl / 1000)) }),
  })
  await app.register(swagger, {
    // A body whose every field is optional may be left out (src/http/validation.ts): say so.
    transformObject: (documentObject) => markOptionalBodies((documentObject as { openapiObject: OpenApiDocument }).openapiObject) as object,
    openapi: {
      info: { title: 'svc', version: '0.1.0', description: 'Email sending API with signed webhooks' },
      components: {
        securitySchemes: {
          session: { type: 'apiKey', in: 'cookie', name: 'svc_session' },
          apiKey: { type: 'apiKey', in: 'header', name: 'x-api-key' },
        },
      },
    },
  })
  await app.register(swaggerUi, { routePrefix: '/docs' })
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger())

  const context: RouteContext = { services, config }
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
  // The dashboard's static files at / (web/), under their own Content-Security-Policy.
  registerDashboard(app)

  app.addHook('onClose', async () => {
    // Best effort, like every usage write: a store that cannot write (disk full) must not fail the stop.
    await services.apiKeys.flushUsage().catch((err) => app.log.warn({ err }, 'could not record API key usage while stopping'))
  })

  return Object.assign(app, { services, registry }) as unknown as App
}
