/** What the engine and its parts log through (pino's shape). */
export interface EngineLogger {
  info(obj: object, msg: string): void
  warn(obj: object, msg: string): void
  error(obj: object, msg: string): void
}

export const noopLogger: EngineLogger = { info () {}, warn () {}, error () {} }
