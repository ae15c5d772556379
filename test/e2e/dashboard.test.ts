// The dashboard in a real browser: Debian's chromium, headless, driven by playwright-core, against a real
// svc on loopback and a real webhook receiver. One person's whole day: sign up, keys, a webhook, a send,
// the email's timeline, a failed delivery retried from the UI, suppressions, log out. It also takes the
// README's screenshots (docs/screenshots/, with UPDATE_SCREENSHOTS=1), at 1280 px.
import assert from 'node:assert/strict'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import { chromiumMissing, freePort, heading, launchChromium, screenshot } from '../helpers/browser.js'
import { startReceiver } from '../helpers/receiver.js'
import { PASSWORD, startServer, uniqueEmail } from '../helpers/server.js'
import { waitFor } from '../helpers/wait.js'

const skip = chromiumMissing("the dashboard's browser test")

test('the dashboard, end to end in chromium: sign up, keys, webhook, send, timeline, retry a failed delivery, suppressions, log out', { skip, timeout: 180_000 }, async (t) => {
  // The receiver fails every attempt until the test says otherwise; one retry 100 ms later, then the
  // delivery is failed for good and waits for a hand retry.
  let failing = true
  const receiver = await startReceiver(t, {
    '/hook': (_req, _n, res) => {
      res.statusCode = failing ? 500 : 200
      res.end(failing ? 'down for maintenance' : 'ok')
    },
  })
  const port = await freePort()
  const origin = `http://127.0.0.1:${port}`
  const server = await startServer(t, { port, env: { PUBLIC_URL: origin, DELIVERY_RETRY_SCHEDULE: '100ms' } })
  assert.equal(server.url, origin)

  const browser = await launchChromium()
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, baseURL: origin })
  const page = await context.newPage()
  page.setDefaultTimeout(20_000)
  // With DASHBOARD_DEBUG=1, what the page looked like at the end (in the temp directory), to see a failure.
  t.after(async () => { if (process.env.DASHBOARD_DEBUG) await page.screenshot({ path: join(tmpdir(), 'svc-dashboard-failure.png'), fullPage: true }).catch(() => {}) })
  t.after(() => browser.close())
  // Anything the Content-Security-Policy blocks, or any uncaught error, fails the test.
  const problems: string[] = []
  // (A 401 or 404 answer is logged as a console error by chromium too: those are the API's, expected.)
  page.on('console', (m) => { if (m.type() === 'error' && !/status of (401|404)/.test(m.text())) problems.push(`console: ${m.text()}`) })
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`))

  // --- Sign up: logged out, / goes to the login page; the form checks as it is typed.
  await page.goto('/')
  await heading(page, 'Log in to svc')
  await page.getByRole('link', { name: 'Sign up' }).click()
  await heading(page, 'Create your svc account')
  const email = uniqueEmail('dashboard')
  await page.getByLabel('Email').fill(email)
  await page.getByLabel('Password').fill('short')
  await page.getByLabel('Password').blur()
  await page.getByText('At least 10 characters (5 more)').waitFor()
  assert.equal(await page.getByLabel('Password').getAttribute('aria-invalid'), 'true')
  await page.getByLabel('Password').fill(PASSWORD)
  await page.getByText('At least 10 characters').waitFor({ state: 'hidden' })
  await page.getByRole('button', { name: 'Sign up' }).click()
  await heading(page, 'Overview')
  await page.getByText(email).waitFor()
  // Focus moved to the new page's heading.
  assert.equal(await page.evaluate('document.activeElement && document.activeElement.tagName'), 'H1')
  const session = (await context.cookies()).find((c) => c.name === 'svc_session')
  assert.ok(session?.httpOnly, 'the session cookie is HttpOnly: the page never holds it')
  const api = server.client()
  api.cookie = `svc_session=${session.value}`

  // --- API keys: the key is shown once, with a copy button; then it is gone from the page.
  await page.getByRole('link', { name: 'API keys', exact: true }).click()
  await heading(page, 'API keys')
  await page.getByLabel('Name').fill('throwaway')
  await page.getByRole('button', { name: 'Create key' }).click()
  const shown = page.getByLabel('API key', { exact: true })
  await shown.waitFor()
  const throwaway = await shown.inputValue()
  assert.match(throwaway, /^svc_sk_/)
  await page.locator('.secret-panel').getByText('will not be shown again').waitFor()
  await page.getByRole('button', { name: 'Copy API key' }).waitFor()
  await page.getByRole('button', { name: 'I have copied it' }).click()
  await shown.waitFor({ state: 'detached' })
  assert.ok(!(await page.content()).includes(throwaway), 'the key is shown once only')
  await page.locator('tr', { hasText: 'throwaway' }).getByText('active').waitFor()

  // A second key, for sending.
  await page.getByLabel('Name').fill('sending')
  await page.getByRole('button', { name: 'Create key' }).click()
  await shown.waitFor()
  const sendingKey = await shown.inputValue()
  await page.getByRole('button', { name: 'I have copied it' }).click()

  // Revoke the first: Escape cancels the dialog, then it is confirmed.
  const row = page.locator('tr', { hasText: 'throwaway' })
  await row.getByRole('button', { name: 'Revoke throwaway' }).click()
  const dialog = page.getByRole('dialog', { name: 'Revoke "throwaway"?' })
  await dialog.waitFor()
  await page.keyboard.press('Escape')
  await dialog.waitFor({ state: 'detached' })
  await row.getByText('active').waitFor()
  await row.getByRole('button', { name: 'Revoke throwaway' }).click()
  await dialog.getByRole('button', { name: 'Revoke key' }).click()
  await row.getByText('revoked', { exact: true }).waitFor()
  const refused = await server.client().post('/api/send', { to: 'a@example.com', subject: 'x', text: 'x' }, { 'x-api-key': throwaway })
  assert.equal(refused.status, 401, 'a revoked key is refused at once')

  // --- A webhook to the receiver on loopback: the secret is shown once.
  await page.getByRole('link', { name: 'Webhooks', exact: true }).click()
  await heading(page, 'Webhooks')
  await page.getByLabel('Endpoint URL').fill('not a url')
  await page.getByLabel('Endpoint URL').blur()
  await page.getByText('Enter a full URL').waitFor()
  await page.getByLabel('Endpoint URL').fill(receiver.url('/hook'))
  await page.getByLabel('email.sent').check()
  await page.getByRole('button', { name: 'Create webhook' }).click()
  const secret = await page.getByLabel('signing secret', { exact: true }).inputValue()
  assert.match(secret, /^whsec_/)
  receiver.secrets = [secret]
  await page.getByRole('button', { name: 'I have copied it' }).click()
  await page.getByRole('link', { name: receiver.url('/hook') }).click()
  await heading(page, receiver.url('/hook'))
  await page.getByText('No deliveries yet').waitFor()

  // --- Send with the key, over HTTP, as a program would; and a few more for the overview.
  const sent = await server.client().post('/api/send', {
    to: 'delivered@simulator.test', subject: 'Welcome aboard', text: 'Hello!',
  }, { 'x-api-key': sendingKey })
  assert.equal(sent.status, 202)
  const emailId: string = sent.body.data.id

  // The deliveries fail (500: a 503 would be a pushback, no retry step), are retried once, and end failed.
  const hook = (await api.get('/api/webhooks')).body.data[0]
  await waitFor('a failed delivery', async () => {
    const res = await api.get(`/api/webhooks/${hook.id}/deliveries?status=failed`)
    return res.body.data.length >= 2 ? res.body.data : false // email.sent and email.delivered
  })
  await page.getByRole('button', { name: 'Refresh' }).click()
  const failedRow = page.locator('tr[data-status="failed"]', { hasText: 'sent' }).first()
  await failedRow.waitFor()
  assert.equal(await failedRow.locator('td[data-label="Answer"]').innerText(), '500')
  assert.equal(await failedRow.locator('td[data-label="Attempts"]').innerText(), '2')
  assert.match(await failedRow.locator('td[data-label="Duration"]').innerText(), /^\d+ ms$/)
  assert.match(await failedRow.locator('td[data-label="Error"]').innerText(), /500/)

  // The log filtered by status.
  await page.getByLabel('Status', { exact: true }).selectOption('succeeded')
  await page.getByText('No succeeded deliveries').waitFor()
  await page.getByLabel('Status', { exact: true }).selectOption('')
  await failedRow.waitFor()

  // The receiver is back: retry one from the UI, and it succeeds.
  failing = false
  const deliveryId = await failedRow.getAttribute('data-delivery')
  assert.ok(deliveryId)
  await failedRow.getByRole('button', { name: /^Retry delivery/ }).click()
  await receiver.until(() => receiver.received.some((r) => r.deliveryId === deliveryId && r.validFor.length === 1) &&
    receiver.received.filter((r) => r.deliveryId === deliveryId).length === 3, 'the retried delivery')
  const succeededRow = page.locator(`tr[data-delivery="${deliveryId}"][data-status="succeeded"]`)
  await waitFor('the retried delivery to show succeeded', async () => {
    if (await succeededRow.count() === 1) return true
    await page.getByRole('button', { name: 'Refresh' }).click()
    await page.waitForTimeout(200)
    return false
  })
  assert.equal(await succeededRow.locator('td[data-label="Answer"]').innerText(), '200')
  assert.equal(await succeededRow.locator('td[data-label="Attempts"]').innerText(), '3')

  // A test event from the UI reaches the receiver, signed.
  await page.getByLabel('Event type').selectOption('email.clicked')
  await page.getByRole('button', { name: 'Send test event' }).click()
  await receiver.until(() => receiver.received.some((r) => r.event === 'email.clicked' && r.validFor.length === 1), 'the test event')
  await page.getByRole('button', { name: 'Refresh' }).click()
  await page.locator('tr[data-status="succeeded"]', { hasText: 'clicked' }).waitFor()
  await page.locator('main h1').scrollIntoViewIfNeeded()
  await screenshot(page, 'webhook-deliveries.png', false)

  // A filter set in the settings (a domain, two tags) is stored and said in the header; the day replayed
  // from its card reaches the receiver again; the filter emptied is none.
  await page.getByLabel('Only mail from these domains').fill('Shop.example.com')
  await page.getByLabel('Only mail with one of these tags').fill('kind:receipt, tenant')
  await page.getByRole('button', { name: 'Save changes' }).click()
  await page.getByText('only for mail from shop.example.com and tagged kind:receipt or tenant').waitFor()
  assert.deepEqual((await api.get(`/api/webhooks/${hook.id}`)).body.data.filter,
    { domains: ['shop.example.com'], tags: [{ name: 'kind', value: 'receipt' }, { name: 'tenant' }] })
  const beforeReplay = receiver.received.length
  await page.getByRole('button', { name: 'Replay', exact: true }).click()
  await receiver.until(() => receiver.received.length > beforeReplay, 'the replayed deliveries')
  await page.getByLabel('Only mail from these domains').fill('')
  await page.getByLabel('Only mail with one of these tags').fill('')
  await page.getByRole('button', { name: 'Save changes' }).click()
  await waitFor('the filter removed', async () => (await api.get(`/api/webhooks/${hook.id}`)).body.data.filter === null)

  // --- The email and its timeline.
  for (const to of ['bounced@simulator.test', 'complained@simulator.test', 'delivered+2@simulator.test', 'delivered+3@simulator.test']) {
    assert.equal((await server.client().post('/api/send', { to, subject: `Your receipt for ${to.split('@')[0]}`, text: 'Thanks' }, { 'x-api-key': sendingKey })).status, 202)
  }
  await waitFor('every email to settle', async () => {
    const res = await api.get('/api/emails?status=queued')
    const deferred = await api.get('/api/emails?status=deferred')
    return res.body.data.length === 0 && deferred.body.data.length === 0
  })
  await page.getByRole('link', { name: 'Emails', exact: true }).click()
  await heading(page, 'Emails')
  await page.getByLabel('Status').selectOption('delivered')
  await page.getByLabel('Recipient').fill('delivered@simulator.test')
  await page.getByRole('button', { name: 'Filter' }).click()
  await page.getByText('1 email shown').waitFor()
  await page.getByRole('link', { name: 'Welcome aboard' }).click()
  await heading(page, 'Welcome aboard')
  assert.ok(page.url().endsWith(`#/emails/${emailId}`))
  const timeline = page.locator('.timeline-item')
  await timeline.nth(1).waitFor()
  assert.deepEqual((await timeline.allInnerTexts()).map((s) => s.split('\n')[0]?.trim().toLowerCase()), ['sent delivered@simulator.test', 'delivered (sandbox) delivered@simulator.test'])

  // --- Suppressions: add one, find it, remove it (after a confirmation).
  await page.getByRole('link', { name: 'Suppressions', exact: true }).click()
  await heading(page, 'Suppressions')
  const add = page.locator('section', { has: page.getByRole('heading', { name: 'Add an address' }) })
  await add.getByLabel('Address').fill('nobody@example')
  await add.getByRole('button', { name: 'Suppress address' }).click()
  await add.getByText('Enter an address like name@example.com').waitFor()
  await add.getByLabel('Address').fill('Gone@Example.com')
  await add.getByRole('button', { name: 'Suppress address' }).click()
  const suppressed = page.locator('tr[data-email="gone@example.com"]')
  await suppressed.waitFor()
  assert.match(await suppressed.innerText(), /manual/i)
  const lookup = page.locator('section', { has: page.getByRole('heading', { name: 'Look up an address' }) })
  await lookup.getByLabel('Address').fill('gone@example.com')
  await lookup.getByRole('button', { name: 'Look up' }).click()
  await lookup.locator('.lookup').getByText('gone@example.com').waitFor()
  await suppressed.getByRole('button', { name: 'Remove gone@example.com' }).click()
  await page.getByRole('dialog').getByRole('button', { name: 'Remove' }).click()
  await suppressed.waitFor({ state: 'detached' })
  assert.equal((await api.get('/api/suppressions/gone%40example.com')).status, 404)
  // The simulator's bounce and complaint are on the list on their own.
  await page.locator('tr[data-email="bounced@simulator.test"]').waitFor()

  // --- The overview, with the week's figures; its screenshot.
  await page.getByRole('link', { name: 'Overview', exact: true }).click()
  await heading(page, 'Overview')
  await page.locator('svg.chart').waitFor()
  const sentMetric = page.getByRole('group', { name: 'Emails sent' })
  assert.equal(await sentMetric.locator('.metric-value').innerText(), '5')
  await page.getByRole('group', { name: 'Bounce rate' }).getByText('20.00 %').waitFor()
  await screenshot(page, 'overview.png', true)

  // --- A scheduled email: its page says when, and a cancel (after a confirmation) makes it canceled.
  const later = await server.client().post('/api/send', {
    to: 'delivered@simulator.test', subject: 'See you tomorrow', text: 'Tomorrow', scheduledAt: new Date(Date.now() + 86_400_000).toISOString(),
    metadata: { orderId: 'ord_7' },
  }, { 'x-api-key': sendingKey })
  assert.equal(later.status, 202, later.text)
  await page.goto(`/#/emails/${later.body.data.id}`)
  await heading(page, 'See you tomorrow')
  await page.getByText('Scheduled for').waitFor()
  await page.getByText('orderId: ord_7').waitFor()
  await page.getByRole('button', { name: 'Cancel email' }).click()
  await page.getByRole('dialog').getByRole('button', { name: 'Cancel email' }).click()
  await page.locator('.page-header .badge', { hasText: 'canceled' }).waitFor()
  assert.equal(await page.getByRole('button', { name: 'Cancel email' }).count(), 0, 'no cancel button once canceled')
  assert.equal((await api.get(`/api/emails/${later.body.data.id}`)).body.data.status, 'canceled')
  await page.getByRole('link', { name: 'Overview', exact: true }).click()
  await heading(page, 'Overview')

  // --- A phone: the same page fits, the nav scrolls instead of overflowing.
  await page.setViewportSize({ width: 390, height: 844 })
  const overflow = await page.evaluate<number>('document.documentElement.scrollWidth - window.innerWidth')
  assert.ok(overflow <= 0, `no sideways scrolling on a phone (${overflow} px too wide)`)
  await page.setViewportSize({ width: 1280, height: 900 })

  // --- Log out: the session is gone, server-side too.
  await page.getByRole('button', { name: 'Log out' }).click()
  await heading(page, 'Log in to svc')
  assert.equal((await api.get('/api/account')).status, 401)
  await page.goto('/#/keys')
  await heading(page, 'Log in to svc')

  assert.deepEqual(problems, [], 'no CSP violation and no script error')
})
