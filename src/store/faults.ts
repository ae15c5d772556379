// Resource faults of a store: errors that mean "the store cannot take a write right now" (the disk is
// full, the database is read-only, an I/O error, the file is locked past the busy timeout, no writable
// MongoDB primary can be reached), as opposed to a bug or a bad request. The HTTP layer answers them
// `503 unavailable` with Retry-After; `/readyz` reports them through the store's StoreHealth, which also
// logs once when the store goes into the fault state and once when it comes out.
//
// Deliberately NOT faults: SQLITE_CORRUPT / SQLITE_NOTADB (retrying will not help and the operator has
// to act: they stay 500 internal_error, logged with the request id), constraint errors, and a store
// closed by this process (shutdown).
//
// This module must not import a driver: it classifies by the error's `code` and `name` only, so the
// SQLite deployment never loads the MongoDB driver and the other way round.

export type FaultKind =
  | 'disk_full' | 'read_only' | 'io_error' | 'cannot_open' | 'locked' | 'out_of_memory'
  | 'unreachable' | 'not_primary' | 'shutting_down' | 'write_concern'

export interface StoreFault {
  kind: FaultKind
  /** For operators (logs, /readyz). Never holds data from a request. */
  reason: string
  /** The code the driver or the OS gave: SQLITE_FULL, ENOSPC, MongoNetworkError, 10107… */
  code: string
  /**
   * 'none': nothing of the write was kept (it was rolled back, or never reached the store).
   * 'unknown': it may have been kept (committed but its flush to disk failed; a network error after the
   * command was sent; a write-concern error). Clients are told so instead of "no effect".
   */
  effect: 'none' | 'unknown'
}

/** What a 503 tells a client to wait before trying again. */
export const RETRY_AFTER_SECONDS = 5

/** A fault already classified (the write queue wraps a failed WAL flush in one of these). */
export class StoreFaultError extends Error {
  constructor (readonly fault: StoreFault, options?: { cause?: unknown }) {
    super(`store fault: ${fault.reason} (${fault.code})`, options)
    this.name = 'StoreFaultError'
  }
}

const REASONS: Record<FaultKind, string> = {
  disk_full: 'the disk is full',
  read_only: 'the database is read-only',
  io_error: 'the disk reported an I/O error',
  cannot_open: 'the database file cannot be opened',
  locked: 'another writer held the database past the busy timeout',
  out_of_memory: 'the store ran out of memory',
  unreachable: 'the database server cannot be reached',
  not_primary: 'no writable primary (the server is not primary, or stepping down)',
  shutting_down: 'the database server is shutting down',
  write_concern: 'the write concern was not satisfied in time',
}

const fault = (kind: FaultKind, code: string, effect: 'none' | 'unknown' = 'none'): StoreFault =>
  ({ kind, reason: REASONS[kind], code, effect })

// SQLite primary result codes (an extended code such as SQLITE_IOERR_WRITE is matched by its primary).
const SQLITE: Record<string, FaultKind> = {
  SQLITE_FULL: 'disk_full',
  SQLITE_READONLY: 'read_only',
  SQLITE_IOERR: 'io_error',
  SQLITE_CANTOPEN: 'cannot_open',
  // busy_timeout is set: BUSY reaches us only after waiting that long for another writer.
  SQLITE_BUSY: 'locked',
  SQLITE_LOCKED: 'locked',
  SQLITE_NOMEM: 'out_of_memory',
}

// Errors of the OS (a failed fdatasync / open of the WAL file).
const ERRNO: Record<string, FaultKind> = {
  ENOSPC: 'disk_full',
  EDQUOT: 'disk_full',
  EROFS: 'read_only',
  EIO: 'io_error',
}

// MongoDB server codes (see the driver's MONGODB_ERROR_CODES and the server's error_codes.yml).
const MONGO_CODES: Record<number, [FaultKind, 'none' | 'unknown']> = {
  6: ['unreachable', 'unknown'], // HostUnreachable
  7: ['unreachable', 'none'], // HostNotFound
  89: ['unreachable', 'unknown'], // NetworkTimeout
  9001: ['unreachable', 'unknown'], // SocketException
  10107: ['not_primary', 'none'], // NotWritablePrimary
  13435: ['not_primary', 'none'], // NotPrimaryNoSecondaryOk
  13436: ['not_primary', 'none'], // NotPrimaryOrSecondary
  10058: ['not_primary', 'none'], // LegacyNotPrimary
  189: ['not_primary', 'unknown'], // PrimarySteppedDown
  11602: ['not_primary', 'unknown'], // InterruptedDueToReplStateChange
  11600: ['shutting_down', 'unknown'], // InterruptedAtShutdown
  91: ['shutting_down', 'unknown'], // ShutdownInProgress
  64: ['write_concern', 'unknown'], // WriteConcernTimeout (WriteConcernFailed before 8.1)
  14031: ['disk_full', 'none'], // OutOfDiskSpace
}

const MONGO_NAMES: Record<string, [FaultKind, 'none' | 'unknown']> = {
  MongoServerSelectionError: ['unreachable', 'none'],
  MongoNetworkError: ['unreachable', 'unknown'],
  MongoNetworkTimeoutError: ['unreachable', 'unknown'],
  MongoWriteConcernError: ['write_concern', 'unknown'],
}

/** The resource fault `err` stands for, or null when it is something else (a bug, a constraint, …). */
export function storeFault (err: unknown): StoreFault | null {
  if (err instanceof StoreFaultError) return err.fault
  if (typeof err !== 'object' || err === null) return null
  const e = err as { code?: unknown; name?: unknown; errno?: unknown; writeConcernError?: { code?: unknown } }
  const name = typeof e.name === 'string' ? e.name : ''
  if (typeof e.code === 'string') {
    if (e.code.startsWith('SQLITE_')) {
      if (e.code === 'SQLITE_IOERR_NOMEM') return fault('out_of_memory', e.code)
      const primary = e.code.split('_', 2).join('_')
      const kind = SQLITE[primary]
      return kind ? fault(kind, e.code) : null
    }
    // A system error from Node (it carries a numeric errno): the disk under the WAL file.
    if (typeof e.errno === 'number' && ERRNO[e.code] !== undefined) return fault(ERRNO[e.code]!, e.code)
  }
  if (name.startsWith('Mongo')) {
    const byName = MONGO_NAMES[name]
    if (byName) return fault(byName[0], name, byName[1])
    // A server error, or a bulk write error carrying a write-concern error.
    for (const code of [e.code, e.writeConcernError?.code]) {
      const byCode = typeof code === 'number' ? MONGO_CODES[code] : undefined
      if (byCode) return fault(byCode[0], String(code), byCode[1])
    }
  }
  return null
}

export type HealthSnapshot =
  | { state: 'ok'; since: string }
  | { state: 'unwritable'; since: string; kind: FaultKind; reason: string; code: string }

export type HealthListener = (now: HealthSnapshot, before: HealthSnapshot) => void

export interface StoreHealthOptions {
  /**
   * One small write that must truly reach the store (a commit, and its flush to disk), rejecting when it
   * cannot. The only thing that takes the store out of the fault state.
   */
  probe: () => Promise<void>
  /** While unwritable, probe this often (in the background, and on check()); default 2000 ms. */
  retryMs?: number
  /**
   * While ok, check() probes at most this often (adapters that do not see every write, e.g. MongoDB:
   * their write faults are found by the probe); default 0: only the first check() probes.
   */
  checkMs?: number
  now?: () => number
}

/**
 * Whether the store can take writes: 'ok', or 'unwritable' with the fault and since when. Adapters call
 * failed(err) when a write fails (only resource faults change anything); recovery is declared only by a
 * probe write that succeeded, never by a write that happened to need no new space. Listeners hear each
 * transition once.
 */
export class StoreHealth {
  private snapshot: HealthSnapshot
  private readonly listeners = new Set<HealthListener>()
  private timer: NodeJS.Timeout | undefined
  private probing: Promise<void> | undefined
  private lastProbe = -Infinity
  private closed = false
  private readonly retryMs: number
  private readonly checkMs: number
  private readonly now: () => number

  constructor (private readonly opts: StoreHealthOptions) {
    this.retryMs = opts.retryMs ?? 2000
    this.checkMs = opts.checkMs ?? 0
    this.now = opts.now ?? Date.now
    this.snapshot = { state: 'ok', since: new Date(this.now()).toISOString() }
  }

  current (): HealthSnapshot {
    return this.snapshot
  }

  /** Records a failed write; returns the fault when it was one (the state is then 'unwritable'). */
  failed (err: unknown): StoreFault | null {
    const f = storeFault(err)
    if (f === null || this.closed) return f
    if (this.snapshot.state === 'unwritable') return f
    this.change({ state: 'unwritable', since: new Date(this.now()).toISOString(), kind: f.kind, reason: f.reason, code: f.code })
    this.timer ??= setInterval(() => { void this.probe() }, this.retryMs).unref()
    return f
  }

  /**
   * The state, after a probe write when one is due: while unwritable at most every retryMs; while ok on
   * the first call, then every checkMs when set.
   */
  async check (): Promise<HealthSnapshot> {
    const since = this.now() - this.lastProbe
    const due = this.snapshot.state === 'unwritable'
      ? since >= this.retryMs
      : this.lastProbe === -Infinity || (this.checkMs > 0 && since >= this.checkMs)
    if (due) await this.probe()
    return this.snapshot
  }

  onChange (listener: HealthListener): () => void {
    this.listeners.add(listener)
    return () => { this.listeners.delete(listener) }
  }

  close (): void {
    this.closed = true
    this.stopTimer()
  }

  private probe (): Promise<void> {
    if (this.closed) return Promise.resolve()
    this.probing ??= (async () => {
      this.lastProbe = this.now()
      try {
        await this.opts.probe()
        if (this.snapshot.state === 'unwritable' && !this.closed) {
          this.stopTimer()
          this.change({ state: 'ok', since: new Date(this.now()).toISOString() })
        }
      } catch (err) {
        this.failed(err)
      } finally {
        this.probing = undefined
      }
    })()
    return this.probing
  }

  private stopTimer (): void {
    if (this.timer) clearInterval(this.timer)
    this.timer = undefined
  }

  private change (next: HealthSnapshot): void {
    const before = this.snapshot
    this.snapshot = next
    for (const listener of this.listeners) {
      try { listener(next, before) } catch { /* a listener's failure is its own */ }
    }
  }
}
