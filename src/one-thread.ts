// One worker thread for occasional work off the main thread (the mailer building a large message, the
// SQLite store's checkpoints): started by the first task and stopped when idle for 30 s, so a process that
// never needs it runs no such thread. One thread each: on two cores the other belongs to the delivery
// threads.
import { Piscina } from 'piscina'

export interface OneThread<Task, Answer> {
  run(task: Task): Promise<Answer>
  /** Lets the running tasks finish, then stops the thread. */
  close(): Promise<void>
  /** close() was called. */
  readonly closed: boolean
}

export function oneThread<Task, Answer> (filename: string, workerData?: unknown): OneThread<Task, Answer> {
  let pool: Piscina | undefined
  let closed = false
  return {
    run (task) {
      pool ??= new Piscina({ filename, workerData, minThreads: 0, maxThreads: 1, idleTimeout: 30_000 })
      return pool.run(task) as Promise<Answer>
    },
    async close () {
      closed = true
      const stopping = pool
      pool = undefined
      await stopping?.close({ force: false })
    },
    get closed () { return closed },
  }
}
