import type { Registry } from 'prom-client'
import type { Config } from '../../../config/index.js'
import type { Services } from '../../app/services.js'

// The routes' view of the process: the use cases and the background workers' status (src/app/services.ts).
export type { Services }

/**
 * What every route plugin is registered with: the services and the validated config, nothing global. The
 * config without its secret: what needs SVC_SECRET (tokens, seals) is a use case's to do.
 */
export interface RouteContext {
  services: Services
  config: Omit<Config, 'secret'>
  /** Where a route's own figures go (/metrics). */
  registry: Registry
}
