import type { Registry } from 'prom-client'
import type { Config } from '../../../config/index.js'
import type { Services } from '../../app/services.js'

// The routes' view of the process: the use cases and the background workers' status (src/app/services.ts).
export type { Services }

/** What every route plugin is registered with: the services and the validated config, nothing global. */
export interface RouteContext {
  services: Services
  config: Config
  /** Where a route's own figures go (/metrics). */
  registry: Registry
}
