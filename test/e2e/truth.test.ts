// The dashboard tells the truth about where mail went (issue 26), in Debian's chromium: the sandbox said on
// every page and on each outcome it decides, the email as it was sent (its html in a frame that runs no
// script), a bounce's reason on the timeline, the account's domain limit, a focus ring that can be seen,
// a navigation that fits a phone; and axe-core finds nothing on these pages.
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { readFileSync } from 'node:fs'
import { test } from 'node:test'
import type { Page } from 'playwright-core'
import { chromiumMissing, freePort, heading, launchChromium, signUpInPage, screenshot } from '../helpers/browser.js'
import { PASSWORD, startServer, uniqueEmail } from '../helpers/server.js'
import { waitFor } from '../helpers/wait.js'

const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8')

/** axe-core's violations on the page as it is (run through the debugger protocol: the page's CSP allows no inline script). */
async function axeViolations (page: Page): Promise<string[]> {
  await page.evaluate(AXE)
  const found = await page.evaluate('axe.run(document, { resultTypes: ["violations"] }).then((r) => r.violations.map((v) => v.id + ": " + v.nodes.map((n) => n.target.join(" ")).join(", ")))')
  return found as string[]
}

/** WCAG contrast of two rgb() colours. */
function contrast (a: string, b: string): number {
  const lum = (c: string) => {
    const [r, g, bl] = (c.match(/[\d.]+/g) ?? []).slice(0, 3).map(Number).map((v) => v / 255).map((v) => (v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4))
    return 0.2126 * r! + 0.7152 * g! + 0.0722 * bl!
  }
  const [hi, lo] = [lum(a), lum(b)].sort((x, y) => y - x)
  return (hi! + 0.05) / (lo! + 0.05)
}

const skip = chromiumMissing("the dashboard's sandbox and message test")

test('the dashboard says when it is the sandbox, shows the email as sent and the bounce reason, the domain limit, a visible focus ring, and a nav that fits 390 px', { skip, timeout: 180_000 }, async (t) => {
  const port = await freePort()
  const origin = `http://127.0.0.1:${port}`
  const server = await startServer(t, { port, env: { PUBLIC_URL: origin } })
  const browser = await launchChromium()
  t.after(() => browser.close())
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, baseURL: origin })
  const page = await context.newPage()
  page.setDefaultTimeout(20_000)
  const problems: string[] = []
  page.on('console', (m) => { if (m.type() === 'error' && !/status of (401|404)/.test(m.text())) problems.push(`console: ${m.text()}`) })
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`))

  await signUpInPage(page, context, uniqueEmail('truth'), PASSWORD)

  // The sandbox, said on every page, from the account the API reports.
  const banner = page.locator('#sandbox')
  await banner.getByText('no email leaves this machine').waitFor()
  const session = (await context.cookies()).find((c) => c.name === 'svc_session')!
  const api = server.client()
  api.cookie = `svc_session=${session.value}`
  assert.equal((await api.get('/api/account')).body.data.transport, 'sandbox')
  const key = (await api.post('/api/keys', { name: 'truth' })).body.data.key as string
  const sends = server.client()
  const html = '<h1 id="hello">Hello, Jane</h1><p>Your order shipped.</p><script>parent.document.title = "pwned"</script><img src="https://tracker.example/p.gif" alt="">'
  const sent = await sends.post('/api/send', { to: 'jane@example.org', subject: 'Order shipped', html, text: 'Hello, Jane\nYour order shipped.' }, { 'x-api-key': key })
  assert.equal(sent.status, 202, sent.text)
  const bounced = await sends.post('/api/send', { to: 'bounced@simulator.test', subject: 'Will bounce', text: 'x' }, { 'x-api-key': key })
  const id = sent.body.data.id as string
  await waitFor('both settled', async () => {
    const a = (await api.get(`/api/emails/${id}`)).body.data
    const b = (await api.get(`/api/emails/${bounced.body.data.id}`)).body.data
    return a.status === 'delivered' && b.status === 'bounced'
  })

  await page.getByRole('link', { name: 'Emails', exact: true }).click()
  await heading(page, 'Emails')
  await page.locator('tr', { hasText: 'Order shipped' }).getByText('Delivered (sandbox)').waitFor()
  await page.getByRole('link', { name: 'Order shipped' }).click()
  await heading(page, 'Order shipped')
  await banner.waitFor()
  await page.locator('.timeline').getByText('Delivered (sandbox)').waitFor()

  // The message as sent: the html in a sandboxed frame (its script never runs), and the text.
  const frame = page.locator('iframe.message-frame')
  assert.equal(await frame.getAttribute('sandbox'), '')
  await page.frameLocator('iframe.message-frame').getByRole('heading', { name: 'Hello, Jane' }).waitFor()
  await page.getByText('Your order shipped.', { exact: false }).first().waitFor()
  assert.match(await page.locator('pre.message-text').innerText(), /^Hello, Jane\nYour order shipped\.$/)
  assert.equal(await page.title(), 'Email · svc', 'the email\'s script did not run')
  assert.deepEqual(await axeViolations(page), [])
  await screenshot(page, 'email-as-sent.png', true)

  // A bounce says why.
  await page.goto(`/#/emails/${bounced.body.data.id}`)
  await heading(page, 'Will bounce')
  await page.locator('.timeline .reason').first().waitFor()
  assert.match(await page.locator('.timeline .reason').first().innerText(), /^Reason: .+/)

  // The account: the domain limit as "n of m", and the transport.
  await page.getByRole('link', { name: 'Account', exact: true }).click()
  await heading(page, 'Account')
  await page.locator('.usage', { hasText: 'Sender domains' }).getByText('0 of 1').first().waitFor()
  await page.getByText('Sandbox: nothing leaves this machine').waitFor()
  assert.deepEqual(await axeViolations(page), [])

  // A focus ring at least 3:1 against the page.
  await page.keyboard.press('Tab')
  await page.keyboard.press('Tab')
  const ring = await page.evaluate<{ width: string; style: string; color: string }>('(() => { const s = getComputedStyle(document.activeElement); return { width: s.outlineWidth, style: s.outlineStyle, color: s.outlineColor } })()')
  assert.notEqual(ring.style, 'none', 'the focused element has an outline')
  assert.ok(parseFloat(ring.width) >= 2, `outline ${ring.width}`)
  assert.ok(contrast(ring.color, 'rgb(255, 255, 255)') >= 3, `ring ${ring.color}`)

  // On a 390 px phone, every page of the navigation is in sight.
  await page.setViewportSize({ width: 390, height: 844 })
  await page.goto('/#/')
  await heading(page, 'Overview')
  for (const name of ['Overview', 'Emails', 'API keys', 'Webhooks', 'Domains', 'Suppressions', 'Account']) {
    const box = await page.locator('#nav').getByRole('link', { name, exact: true }).boundingBox()
    assert.ok(box !== null && box.x >= 0 && box.x + box.width <= 390, `${name} is on screen: ${JSON.stringify(box)}`)
  }
  assert.deepEqual(await axeViolations(page), [])
  // What the browser refused from the email, and nothing else: its script (the frame is sandboxed) and
  // its remote image (the dashboard's CSP, which the frame inherits).
  assert.deepEqual(problems.map((p) => /sandboxed and the 'allow-scripts'/.test(p) ? 'script blocked' : /tracker\.example.*Content Security Policy/.test(p) ? 'image blocked' : p),
    ['script blocked', 'image blocked'])
})

test('the dashboard at work: key permissions, a complaint found by its event, full ids and kept focus in the delivery log, errors that stay, a localhost warning, an empty overview that shows the way, chart labels on a phone', { skip, timeout: 180_000 }, async (t) => {
  const port = await freePort()
  const origin = `http://127.0.0.1:${port}`
  // A webhook that nobody answers: one retry 100 ms later, then failed, waiting for a hand retry.
  const server = await startServer(t, { port, env: { PUBLIC_URL: origin, DELIVERY_RETRY_SCHEDULE: '100ms' } })
  const browser = await launchChromium()
  t.after(() => browser.close())
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, baseURL: origin })
  const page = await context.newPage()
  page.setDefaultTimeout(20_000)

  await signUpInPage(page, context, uniqueEmail('work'), PASSWORD)

  // The empty overview links the way in: API keys, the API documentation, the simulator addresses.
  const welcome = page.locator('.empty', { hasText: 'Nothing sent' })
  assert.equal(await welcome.getByRole('link', { name: 'API key' }).getAttribute('href'), '#/keys')
  assert.equal(await welcome.getByRole('link', { name: /\/docs/ }).getAttribute('href'), '/docs')
  await welcome.getByText('complained@simulator.test').waitFor()

  // A key with the sending permission only: chosen in the form, shown in the list.
  await page.getByRole('link', { name: 'API keys', exact: true }).click()
  await heading(page, 'API keys')
  await page.getByLabel('Name').fill('mailer')
  await page.getByLabel('Permission').selectOption('sending_access')
  await page.getByRole('button', { name: 'Create key' }).click()
  const key = await page.getByLabel('API key', { exact: true }).inputValue()
  await page.getByRole('button', { name: 'I have copied it' }).click()
  await page.locator('tr', { hasText: 'mailer' }).getByText('Sending only').waitFor()
  assert.deepEqual(await axeViolations(page), [])
  const session = (await context.cookies()).find((c) => c.name === 'svc_session')!
  const api = server.client()
  api.cookie = `svc_session=${session.value}`
  assert.equal((await api.get('/api/keys')).body.data[0].permission, 'sending_access')

  // A complaint happens on a delivered email: the event filter finds it.
  const sends = server.client()
  const complained = await sends.post('/api/send', { to: 'complained@simulator.test', subject: 'Spam, they said', text: 'x' }, { 'x-api-key': key })
  assert.equal(complained.status, 202, complained.text)
  await sends.post('/api/send', { to: 'delivered@simulator.test', subject: 'Fine', text: 'x' }, { 'x-api-key': key })
  await waitFor('the complaint', async () => (await api.get(`/api/emails/${complained.body.data.id}`)).body.data.events.some((e: { type: string }) => e.type === 'email.complained'))
  await page.getByRole('link', { name: 'Emails', exact: true }).click()
  await heading(page, 'Emails')
  await page.getByLabel('Had event').selectOption('email.complained')
  await page.getByRole('button', { name: 'Filter' }).click()
  await page.getByText('1 email shown').waitFor()
  await page.getByRole('link', { name: 'Spam, they said' }).waitFor()
  assert.equal(await page.getByRole('link', { name: 'Fine' }).count(), 0)
  assert.deepEqual(await axeViolations(page), [])

  // The delivery log: whole email ids; focus stays on the row after Retry, and after the log reloads.
  const hook = (await api.post('/api/webhooks', { url: 'http://127.0.0.1:9/hook', events: ['email.delivered'] })).body.data
  const test = (await api.post(`/api/webhooks/${hook.id}/test`, { event: 'email.delivered' })).body.data
  await waitFor('the test delivery to fail', async () => (await api.get(`/api/webhooks/${hook.id}/deliveries`)).body.data[0].status === 'failed')
  await page.goto(`/#/webhooks/${hook.id}`)
  await heading(page, 'http://127.0.0.1:9/hook')
  const row = page.locator(`tr[data-delivery="${test.id}"]`)
  const idLink = row.locator('.id-link')
  assert.equal(await idLink.innerText(), test.emailId)
  assert.ok(await idLink.evaluate((el) => el.scrollWidth <= el.clientWidth), 'the email id is not cut')
  await row.getByRole('button', { name: `Retry delivery ${test.id}` }).focus()
  await page.keyboard.press('Enter')
  const focusedDelivery = "(() => document.activeElement && document.activeElement.closest('tr') && document.activeElement.closest('tr').dataset.delivery)()"
  await waitFor('focus on the retried row', async () => (await page.evaluate(focusedDelivery)) === test.id)
  await page.evaluate(`document.querySelector('tr[data-delivery="${test.id}"]').dataset.before = 'reload'`)
  await waitFor('the log to reload', async () => (await page.locator(`tr[data-delivery="${test.id}"][data-before]`).count()) === 0)
  assert.equal(await page.evaluate(focusedDelivery), test.id, 'focus is still on the row after the log reloaded')
  assert.deepEqual(await axeViolations(page), [])

  // An error stays until it is dismissed (a clock that runs ahead a minute does not take it away).
  const errors = await context.newPage()
  await errors.clock.install()
  await errors.route('**/retry', (route) => route.fulfill({
    status: 503, contentType: 'application/json', body: JSON.stringify({ success: false, error: { code: 'unavailable', message: 'The store is unavailable; try again' } }),
  }))
  await waitFor('the delivery to fail again', async () => (await api.get(`/api/webhooks/${hook.id}/deliveries`)).body.data[0].status === 'failed')
  await errors.goto(`/#/webhooks/${hook.id}`)
  await heading(errors, 'http://127.0.0.1:9/hook')
  await errors.locator(`tr[data-delivery="${test.id}"]`).getByRole('button', { name: `Retry delivery ${test.id}` }).click()
  const toast = errors.locator('#toast')
  await toast.getByText('The store is unavailable; try again').waitFor()
  await errors.clock.runFor(60_000)
  assert.ok(await toast.getByText('The store is unavailable; try again').isVisible(), 'the error is still there a minute later')
  await toast.getByRole('button', { name: 'Dismiss' }).click()
  await toast.getByText('The store is unavailable; try again').waitFor({ state: 'hidden' })
  await errors.close()

  // A domain's records in development name this machine: said so.
  await page.getByRole('link', { name: 'Domains', exact: true }).click()
  await heading(page, 'Domains')
  await page.getByLabel('Domain', { exact: true }).fill('shop.example.test')
  await page.getByRole('button', { name: 'Add domain' }).click()
  await heading(page, 'shop.example.test')
  await page.locator('[data-warning="localhost"]').getByText('point at this machine').waitFor()
  assert.deepEqual(await axeViolations(page), [])
  await page.getByRole('link', { name: 'Account', exact: true }).click()
  await page.locator('.usage', { hasText: 'Sender domains' }).getByText('1 of 1').first().waitFor()

  // The chart's labels on a 390 px phone are at least 9 px tall.
  await page.setViewportSize({ width: 390, height: 844 })
  await page.goto('/#/')
  await heading(page, 'Overview')
  const heights = await page.locator('svg.chart text.axis').evaluateAll((els) => els.map((el) => el.getBoundingClientRect().height))
  assert.ok(heights.length > 0)
  assert.ok(Math.min(...heights) >= 9, `label heights ${heights.join(', ')}`)
  assert.deepEqual(await axeViolations(page), [])
})
