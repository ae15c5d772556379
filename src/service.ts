// The whole service: the HTTP app plus the background workers (the mail queue, the delivery engine),
// built around one store. server.ts and the tests both start svc through here, so what is tested is
// what runs.
import type { Config } from '../config/index.js'
import { buildApp, type App, type AppDeps } from './app.js'

/** A background part of the service: started after the app is ready, stopped before the store closes. */
export interface Component {
  readonly name: string
  start(): Promise<void>
  /** Stop taking work; finish or release what is in flight before resolving. */
  stop(): Promise<void>
}

export type ServiceDeps = AppDeps

export interface Service {
  app: App
  components: Component[]
  /** Starts the background components (the app itself is started by listen() or inject()). */
  start(): Promise<void>
  /** Stops the components, then the app. The store stays open: whoever opened it closes it. */
  stop(): Promise<void>
}

export async function createService (config: Config, deps: ServiceDeps): Promise<Service> {
  const app = await buildApp(config, deps)
  const components: Component[] = []
  let started: Component[] = []
  return {
    app,
    components,
    async start () {
      await app.ready()
      for (const c of components) {
        await c.start()
        started.push(c)
      }
    },
    async stop () {
      // Reverse order: what started last depends on what started first.
      for (const c of started.reverse()) await c.stop()
      started = []
      await app.close()
    },
  }
}
