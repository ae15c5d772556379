// buildApp(config, deps): the Fastify instance with every plugin and route registered, and no listen().
// Tests build it around a real store; src/server.ts builds it and listens.
import cookie from '@fastify/cookie'
import rateLimit from '@fastify/rate-limit'
import swagger from '@fastify/swagger'
import swaggerUi from '@fastify/swagger-ui'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify'
import { randomBytes } from 'node:crypto'
import { Registry } from 'prom-client'
import sjson from 'secure-json-parse'
import type { Config } from '../config/index.js'
import { createAccountService } from './domain/accounts.js'
import { createApiKeyService } from './domain/api-keys.js'
import { systemClock, type Clock } from './domain/clock.js'
import { createDeliveryService } from './domain/deliveries.js'
import { createEmailService } from './domain/emails.js'
import { createSuppressionService } from './domain/suppressions.js'
import { createWebhookService } from './domain/webhooks.js'
import { parseCidrList, type Resolver } from './domain/webhook-url.js'
import { createDns } from './domain/dns.js'
import { createDomainService, spfMechanism } from './domain/domains.js'
import domainRoutes from './http/routes/domains/index.js'
import { RateLimited } from './errors.js'
import { registerErrorHandling } from './http/errors.js'
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
const requestPrefix = randomBytes(6).toString('hex')
let requestCount = 0

export function createServices (config: Config, deps: AppDeps): Services {
  if (config.secret === undefined) throw new Error('config.secret must be resolved before building the app')
  const clock = deps.clock ?? systemClock
  const { store } = deps
  // DNS_SERVERS: one resolver for sender-domain checks and webhook hosts.
  const dns = createDns(config.dnsServers)
  const webhooks = createWebhookService({
    store,
    clock,
    urlPolicy: { production: config.production, allowedCidrs: parseCidrList(config.webhookAllowedCidrs) },
    resolver: deps.resolver ?? dns.hosts,
  })
  const domains = createDomainService({
    store,
    clock,
    secret: config.secret,
    dns,
    settings: {
      bounceDomain: config.mail.bounceDomain,
      mxHost: config.mail.mxHost,
      spfMechanism: spfMechanism({ spfInclude: config.mail.spfInclude, smtpUrl: config.smtpUrl, mxHost: config.mail.mxHost }),
    },
    requireVerified: config.mail.requireVerifiedDomain,
  })
  return {
    store,
    accounts: createAccountService({ store, secret: config.secret, clock, sessionTtlMs: config.sessionTtlMs }),
    apiKeys: createApiKeyService({ store, secret: config.secret, clock }),
    webhooks,
    emails: createEmailService({ store, clock, mailFrom: config.mailFrom, senders: domains }),
    domains,
    suppressions: createSuppressionService({ store, clock }),
    readiness: new Map(),
    deliveries: createDeliveryService({
      store, clock, webhooks, onBackgroundError: (err) => deps.logger?.error({ err }, 'recovering deliveries failed'),
    }),
  }
}

export async function buildApp (config: Config, deps: AppDeps): Promise<App> {
  const services = createServices(config, deps)
  const registry = deps.registry ?? new Registry()

  const app = Fastify({
    ...(deps.logger ? { loggerInstance: deps.logger } : { logger: false }),
    bodyLimit: config.bodyLimit,
    trustProxy: config.trustProxy,
    // One log line per request (onResponse below) instead of Fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
    requestIdHeader: false,
    genReqId: (req) => {
      const given = req.headers['x-request-id']
      if (typeof given === 'string' && REQUEST_ID.test(given)) return given
      // A request id has to be unique, not unguessable: a per-process random prefix and a counter, so
      // that no request pays for a call into the CSPRNG.
      requestCount = (requestCount + 1) % 0x1000000000000
      return `req_${requestPrefix}${requestCount.toString(16).padStart(12, '0')}`
    },
    // Tracking tokens travel in the path (/t/c/<token>), and a click token carries its whole link.
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 8192 },
  }).withTypeProvider<TypeBoxTypeProvider>()

  app.setValidatorCompiler(validatorCompiler)
  app.decorateRequest('account', null)
  app.decorateRequest('sessionTokenHash', null)
  app.decorateRequest('apiKey', null)

  // JSON only. Fastify's text/plain parser goes, so any other body type is 415; an empty JSON body is
  // "no body" (DELETE with a Content-Type header), and __proto__ keys are refused outright.
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => {
    if (body === '' || (typeof body === 'string' && body.trim() === '')) return done(null, undefined)
    try {
      done(null, sjson.parse(body as string, undefined, { protoAction: 'error', constructorAction: 'error' }))
    } catch (err) {
      done(Object.assign(err as Error, { statusCode: 400 }), undefined)
    }
  })

  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id)
  })
  app.addHook('onResponse', async (request, reply) => {
    request.log.info({
      method: request.method,
      path: request.url.split('?', 1)[0],
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
  await app.register(suppressionRoutes, context)
  await app.register(trackingRoutes, context)
  await app.register(domainRoutes, context)

  app.addHook('onClose', async () => {
    // Best effort, like every usage write: a store that cannot write (disk full) must not fail the stop.
    await services.apiKeys.flushUsage().catch((err) => app.log.warn({ err }, 'could not record API key usage while stopping'))
  })

  return Object.assign(app, { services, registry }) as unknown as App
}
