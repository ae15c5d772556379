import assert from 'node:assert/strict'
import { ConfigError, loadConfig } from '../../config/index.js'

/** The problems loadConfig names for `env` (one line each); fails the test when it loads. */
export function configProblems (env: Record<string, string>): string[] {
  try {
    loadConfig(env)
  } catch (err) {
    assert.ok(err instanceof ConfigError)
    return err.problems
  }
  assert.fail('expected a ConfigError')
}
