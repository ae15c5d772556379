// The plan-limit rule, once for keys, webhooks, domains and templates: the limit comes from the plan,
// and the refusal names the plan and the number.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { AppError } from '../../src/errors.js'
import { planLimit, planLimitReached, withinPlan, type Counted } from '../../src/domain/plan-limits.js'
import { PLANS, PLAN_NAMES } from '../../src/domain/plans.js'

const COUNTED: Counted[] = ['apiKeys', 'webhooks', 'domains', 'templates']

describe('plan limits', () => {
  test('every limit is the plan table\'s', () => {
    for (const plan of PLAN_NAMES) {
      for (const what of COUNTED) assert.equal(planLimit(plan, what), PLANS[plan][what])
    }
  })

  test('the refusal is 403 plan_limit_reached and names the plan, the limit and how to make room', () => {
    const keys = planLimitReached('free', 'apiKeys')
    assert.ok(keys instanceof AppError)
    assert.equal(keys.code, 'plan_limit_reached')
    assert.equal(keys.statusCode, 403)
    assert.equal(keys.message, 'The Free plan allows 3 active API keys; revoke one or upgrade')
    assert.equal(planLimitReached('pro', 'webhooks').message, 'The Pro plan allows 10 webhooks; delete one or upgrade')
    assert.equal(planLimitReached('free', 'domains').message, 'The Free plan allows 1 domain(s); delete one or upgrade')
    assert.equal(planLimitReached('free', 'templates').message, 'The Free plan allows 20 templates; delete one or upgrade')
  })

  test('withinPlan gives the store the plan\'s limit and passes its answer on', async () => {
    const asked: number[] = []
    const insert = async (limit: number): Promise<'created' | 'name_taken' | 'limit_reached'> => {
      asked.push(limit)
      return 'created'
    }
    const outcome = await withinPlan('pro', 'domains', insert)
    assert.equal(outcome, 'created')
    assert.deepEqual(asked, [PLANS.pro.domains])
    assert.equal(await withinPlan('free', 'domains', async () => 'name_taken' as const), 'name_taken')
  })

  test('a store that says the limit is reached becomes the refusal', async () => {
    await assert.rejects(withinPlan('free', 'webhooks', async () => 'limit_reached' as const), (err: unknown) => {
      assert.ok(err instanceof AppError)
      assert.equal(err.code, 'plan_limit_reached')
      assert.match(err.message, /^The Free plan allows 5 webhooks;/)
      return true
    })
  })
})
