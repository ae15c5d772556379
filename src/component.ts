// A background part of the service (the delivery engine, the mailer, …), in a module of its own so that
// the parts and the service that runs them do not import each other.

/** A background part of the service: started after the app is ready, stopped before the store closes. */
export interface Component {
  readonly name: string
  start(): Promise<void>
  /** Stop taking work; finish or release what is in flight before resolving. */
  stop(): Promise<void>
}
