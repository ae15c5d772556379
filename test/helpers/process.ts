// svc as an operator runs it: the compiled server in a child process, on the environment given.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process'
import { once } from 'node:events'
import type { TestContext } from 'node:test'
import { fileURLToPath } from 'node:url'
import { TEST_SECRET } from './server.js'

export const SERVER_FILE = fileURLToPath(new URL('../../src/server.js', import.meta.url))

export interface ServerProcess {
  process: ChildProcessWithoutNullStreams
  url: string
  /** Everything it printed so far, stdout and stderr. */
  output: () => string
}

/**
 * Starts the server on a free port and resolves with its URL once it listens. Killed (SIGKILL) with the
 * test unless the test stopped it first. `prefix` runs it through another command that execs it
 * (`setpriv …`), so that the child is still the server.
 */
export async function startServerProcess (t: Pick<TestContext, 'after'>, env: Record<string, string>, prefix: string[] = []): Promise<ServerProcess> {
  const [command, ...args] = [...prefix, process.execPath, SERVER_FILE]
  const child = spawn(command, args, {
    env: { PATH: process.env.PATH ?? '', PORT: '0', SVC_SECRET: TEST_SECRET, LOG_LEVEL: 'info', ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  t.after(() => killProcess(child))
  let output = ''
  // Read everything, always: a child whose pipe is full stops.
  child.stderr.on('data', (chunk: Buffer) => { output += chunk.toString() })
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString()
      const m = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output)
      if (m) resolve(m[1]!)
    })
    child.once('exit', (code) => reject(new Error(`server exited early (${code}): ${output}`)))
  })
  return { process: child, url, output: () => output }
}

/** SIGKILL, and wait for the exit; nothing if it has already exited. */
export async function killProcess (child: ChildProcessWithoutNullStreams): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = once(child, 'exit')
  child.kill('SIGKILL')
  await exited
}
