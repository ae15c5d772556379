// When the SQLite store's checkpoint thread runs (src/store/sqlite/checkpoints.ts): soon after commits,
// one at a time, at most one start per interval, once more after a burst ends, never beside the store's
// own checkpoint. A fake runner and clock: no thread, no file.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { BackgroundCheckpoints, type CheckpointResult, type CheckpointRunner } from '../../src/store/sqlite/checkpoints.js'
import { ManualTimers } from '../helpers/timers.js'

/** A runner whose checkpoints end only when the test says. */
class HeldRunner implements CheckpointRunner {
  started = 0
  closed = false
  private ends: Array<{ resolve: (r: CheckpointResult) => void; reject: (err: Error) => void }> = []
  checkpoint (): Promise<CheckpointResult> {
    this.started += 1
    return new Promise((resolve, reject) => this.ends.push({ resolve, reject }))
  }

  async close (): Promise<void> { this.closed = true }
  get running (): number { return this.ends.length }
  /** Ends the oldest checkpoint in flight; lets its callbacks run. */
  async finish (result: CheckpointResult = { busy: false, log: 10, checkpointed: 10 }): Promise<void> {
    this.ends.shift()!.resolve(result)
    await settle()
  }

  async fail (): Promise<void> {
    this.ends.shift()!.reject(new Error('disk I/O error'))
    await settle()
  }
}

const settle = () => new Promise<void>((resolve) => setImmediate(resolve))

function setup (everyMs = 100) {
  const runner = new HeldRunner()
  const timers = new ManualTimers()
  const clock = { t: 1_000, now () { return this.t } }
  const outcomes: boolean[] = []
  const checkpoints = new BackgroundCheckpoints(runner, { everyMs, clock, timers, onDone: ({ ok }) => outcomes.push(ok) })
  return { runner, timers, clock, checkpoints, outcomes }
}

/** Time passes in steps of 10 ms; a timer fires once its delay has passed since it was set. */
async function run (s: ReturnType<typeof setup>, ms: number, each: () => void): Promise<void> {
  const setAt = new Map<unknown, number>()
  for (let elapsed = 0; elapsed < ms; elapsed += 10) {
    each()
    if (s.runner.running > 0) await s.runner.finish()
    s.clock.t += 10
    for (const [id, t] of s.timers.pending) {
      if (!setAt.has(id)) setAt.set(id, s.clock.t - 10)
      if (s.clock.t >= setAt.get(id)! + t.ms) {
        s.timers.pending.delete(id)
        t.fn()
      }
    }
  }
}

describe('background checkpoints', () => {
  test('nothing runs before a commit; the first commit starts one at once', () => {
    const { runner, checkpoints } = setup()
    assert.equal(runner.started, 0)
    checkpoints.committed()
    assert.equal(runner.started, 1)
  })

  test('one at a time: commits during a checkpoint start one more after it, an interval after the last start', async () => {
    const { runner, timers, clock, checkpoints } = setup(100)
    checkpoints.committed()
    clock.t += 30
    checkpoints.committed()
    checkpoints.committed()
    assert.equal(runner.started, 1, 'none beside the one running')
    await runner.finish()
    assert.equal(runner.started, 1, 'not yet: 30 ms since the last start')
    assert.deepEqual([...timers.pending.values()].map((t) => t.ms), [70])
    clock.t += 70
    timers.fireAll()
    assert.equal(runner.started, 2, 'the commits made meanwhile are checkpointed')
    await runner.finish()
    assert.equal(timers.pending.size, 0, 'no commit since: nothing more')
    await checkpoints.idle()
  })

  test('a burst of commits makes one checkpoint per interval, not one per commit, and one after it ends', async () => {
    const s = setup(100)
    await run(s, 490, () => s.checkpoints.committed())
    assert.equal(s.runner.started, 5, 'a commit every 10 ms for half a second: one start per 100 ms')
    await run(s, 300, () => {})
    assert.equal(s.runner.started, 6, 'the commits after the last start get theirs once the interval is up')
    await s.checkpoints.idle()
  })

  test('a checkpoint that failed is reported, and later commits still start one', async () => {
    const { runner, timers, clock, checkpoints, outcomes } = setup(100)
    checkpoints.committed()
    await runner.fail()
    assert.deepEqual(outcomes, [false])
    clock.t += 100
    checkpoints.committed()
    assert.equal(timers.pending.size, 0)
    assert.equal(runner.started, 2)
    await runner.finish({ busy: false, log: 7, checkpointed: 7 })
    assert.deepEqual(outcomes, [false, true])
  })

  test('close() drops the scheduled checkpoint, waits for the one running, closes the thread; commits after start nothing', async () => {
    const { runner, timers, clock, checkpoints } = setup(100)
    checkpoints.committed()
    clock.t += 10
    checkpoints.committed()
    const closing = checkpoints.close()
    assert.equal(runner.closed, false, 'the checkpoint in flight finishes first')
    await runner.finish()
    await closing
    assert.equal(runner.closed, true)
    assert.equal(timers.pending.size, 0)
    checkpoints.committed()
    assert.equal(runner.started, 1)
    await checkpoints.idle()
  })
})
