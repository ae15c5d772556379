// A budget of bytes held at once, shared first come, first served: what bounds memory where many large
// things could be in hand together (request bodies being read and parsed, attachment bytes on their way
// to a relay). One thing larger than the whole budget is let in alone, never refused for its size here.

/** The waiting was given up (its signal aborted) before room was made. */
export class BudgetWaitAborted extends Error {
  constructor () {
    super('gave up waiting for room in the byte budget')
    this.name = 'BudgetWaitAborted'
  }
}

interface Waiter { n: number; go: () => void }

export class ByteBudget {
  private used = 0
  private readonly waiting: Waiter[] = []

  constructor (private readonly limit: number) {}

  /**
   * Resolves once `n` bytes fit (or nothing else is held); give them back with give(n). With a signal,
   * rejects with BudgetWaitAborted when it aborts first, and nothing is held then.
   */
  take (n: number, signal?: AbortSignal): Promise<void> {
    if (n <= 0) return Promise.resolve()
    if (this.waiting.length === 0 && this.fits(n)) {
      this.used += n
      return Promise.resolve()
    }
    if (signal?.aborted === true) return Promise.reject(new BudgetWaitAborted())
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        n,
        go: () => {
          signal?.removeEventListener('abort', onAbort)
          resolve()
        },
      }
      const onAbort = () => {
        const at = this.waiting.indexOf(waiter)
        if (at < 0) return
        this.waiting.splice(at, 1)
        reject(new BudgetWaitAborted())
        // The head may have been what held the others back.
        this.admit()
      }
      signal?.addEventListener('abort', onAbort, { once: true })
      this.waiting.push(waiter)
    })
  }

  give (n: number): void {
    if (n <= 0) return
    this.used -= n
    this.admit()
  }

  /** Bytes held now. */
  get held (): number {
    return this.used
  }

  /** Takes waiting for room. */
  get queued (): number {
    return this.waiting.length
  }

  // First come, first served: a large one at the head is not overtaken for ever by small ones.
  private admit (): void {
    while (this.waiting.length > 0 && this.fits(this.waiting[0]!.n)) {
      const next = this.waiting.shift()!
      this.used += next.n
      next.go()
    }
  }

  private fits (n: number): boolean {
    return this.used === 0 || this.used + n <= this.limit
  }
}
