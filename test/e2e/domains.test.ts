// The dashboard's Domains page in a real browser (Debian's chromium, headless, through playwright-core)
// against a real svc on loopback. DNS_SERVERS names a closed port on loopback, so "Verify now" asks a DNS
// server that never answers: the check fails fast, learns nothing, and the records stay pending.
import assert from 'node:assert/strict'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import { chromiumMissing, freePort, heading, launchChromium, signUpInPage } from '../helpers/browser.js'
import { startServer, uniqueEmail, PASSWORD } from '../helpers/server.js'

const skip = chromiumMissing("the Domains page's browser test")

test('the Domains page in chromium: add a domain, copy its DKIM record, verify (DNS silent), plan limit, delete', { skip, timeout: 120_000 }, async (t) => {
  const port = await freePort()
  const origin = `http://127.0.0.1:${port}`
  const server = await startServer(t, { port, env: { PUBLIC_URL: origin, DNS_SERVERS: '127.0.0.1:9' } })
  const browser = await launchChromium()
  t.after(() => browser.close())
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, baseURL: origin, permissions: ['clipboard-read', 'clipboard-write'] })
  const page = await context.newPage()
  page.setDefaultTimeout(20_000)
  t.after(async () => { if (process.env.DASHBOARD_DEBUG) await page.screenshot({ path: join(tmpdir(), 'svc-domains-failure.png'), fullPage: true }).catch(() => {}) })
  const problems: string[] = []
  // The API's 4xx answers (the plan limit, the session probe) are logged by chromium too: expected.
  page.on('console', (m) => { if (m.type() === 'error' && !/status of (401|403|404)/.test(m.text())) problems.push(`console: ${m.text()}`) })
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`))

  // Sign up in the page, so the browser holds the session.
  const api = server.client()
  api.cookie = `svc_session=${await signUpInPage(page, context, uniqueEmail('domains'), PASSWORD)}`

  // --- The list, from the navigation: empty at first.
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Domains', exact: true }).click()
  await heading(page, 'Domains')
  assert.equal(await page.getByRole('link', { name: 'Domains', exact: true }).getAttribute('aria-current'), 'page')
  await page.getByText('No sender domains yet').waitFor()

  // The form checks as it is typed: a URL is not a domain name.
  const name = page.getByLabel('Domain', { exact: true })
  await name.fill('https://shop.example.com/')
  await name.blur()
  await page.getByText('Enter the domain name only').waitFor()
  assert.equal(await name.getAttribute('aria-invalid'), 'true')
  await name.fill('localhost')
  await page.getByText('Needs at least two parts').waitFor()
  await name.fill('Shop.Example.com')
  await page.getByText('Needs at least two parts').waitFor({ state: 'hidden' })
  assert.equal(await name.getAttribute('aria-invalid'), 'false')
  await page.getByRole('button', { name: 'Add domain' }).click()

  // --- Its detail: the records to publish, the DKIM one with copy buttons.
  await heading(page, 'shop.example.com')
  const domain = (await api.get('/api/domains')).body.data[0]
  assert.equal(domain.name, 'shop.example.com')
  assert.ok(page.url().endsWith(`#/domains/${domain.id}`))
  await page.locator('main .page-header').getByText('pending', { exact: true }).waitFor()
  const dkim = page.locator('tr[data-purpose="dkim"]')
  const dkimRecord = domain.records.find((r: { purpose: string }) => r.purpose === 'dkim')
  assert.equal(await dkim.locator('td[data-label="Type"]').innerText(), 'TXT')
  assert.equal(await dkim.locator('td[data-label="Name"] code').innerText(), dkimRecord.name)
  assert.match(dkimRecord.name, /^svc[0-9a-f]{8}\._domainkey\.shop\.example\.com$/)
  assert.equal(await dkim.locator('td[data-label="Value"] code').innerText(), dkimRecord.value)
  assert.match(dkimRecord.value, /^v=DKIM1; k=rsa; p=[A-Za-z0-9+/=]{300,}$/)
  assert.equal(await dkim.locator('td[data-label="Required"]').innerText(), 'required')
  assert.equal(await page.locator('tr[data-purpose="dmarc"] td[data-label="Required"]').innerText(), 'suggested')
  assert.equal(await page.locator('tr[data-purpose="return_path"] td[data-label="Priority"]').innerText(), '10')
  assert.equal(await page.locator('table.dns-records tbody tr').count(), domain.records.length)
  await dkim.getByRole('button', { name: 'Copy DKIM record name' }).waitFor()
  const copyValue = dkim.getByRole('button', { name: 'Copy DKIM record value' })
  await copyValue.click()
  await copyValue.getByText('Copied').waitFor()
  assert.equal(await page.evaluate('navigator.clipboard.readText()'), dkimRecord.value, 'the copy button copies the whole value')

  // --- Verify now, from the keyboard: DNS does not answer, so nothing is learned, and no error shows.
  const verify = page.getByRole('button', { name: 'Verify now' })
  await verify.focus()
  await page.keyboard.press('Enter')
  const result = page.locator('.verify-result[role="status"]')
  await result.getByText('0 of 3 required records found').waitFor()
  assert.equal(await verify.getAttribute('aria-disabled'), null, 'the button is ready again')
  assert.equal(await page.evaluate('document.activeElement && document.activeElement.textContent'), 'Verify now', 'focus stays on the button')
  assert.deepEqual(await page.locator('table.dns-records tbody tr').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-status'))), ['pending', 'pending', 'pending', 'pending'])
  assert.equal(await page.locator('main .alert.tone-danger, main .error-text').count(), 0, 'a silent DNS server is not an error')
  assert.equal(await page.locator('main [role="alert"]').count(), 0)
  const after = (await api.get(`/api/domains/${domain.id}`)).body.data
  assert.ok(after.lastCheckedAt, 'the check ran')
  await page.locator('main .page-sub').getByText('Last checked never').waitFor({ state: 'detached' })

  // --- On a phone the long DKIM value wraps inside its cell: the page never scrolls sideways.
  await page.setViewportSize({ width: 390, height: 844 })
  const overflow = await page.evaluate<number>('document.documentElement.scrollWidth - window.innerWidth')
  assert.ok(overflow <= 0, `no sideways scrolling on a phone (${overflow} px too wide)`)
  const valueBox = await dkim.locator('td[data-label="Value"] code').boundingBox()
  assert.ok(valueBox && valueBox.x + valueBox.width <= 390, 'the value stays on screen')
  await page.setViewportSize({ width: 1280, height: 900 })

  // --- The list shows it; the free plan's one domain is used, and the API's refusal is shown.
  await page.getByRole('navigation', { name: 'Breadcrumb' }).getByRole('link', { name: 'Domains' }).click()
  await heading(page, 'Domains')
  const row = page.locator(`tr[data-domain="${domain.id}"]`)
  await row.getByText('pending').waitFor()
  assert.equal(await row.locator('td[data-label="Required records"]').innerText(), '0 of 3 found')
  await page.getByLabel('Domain', { exact: true }).fill('other.example.org')
  await page.getByRole('button', { name: 'Add domain' }).click()
  await page.locator('form [role="alert"]').getByText('plan allows 1 domain').waitFor()
  assert.equal((await api.get('/api/domains')).body.data.length, 1)

  // --- Delete, after a confirmation (Escape cancels it first).
  await row.getByRole('link', { name: 'shop.example.com' }).click()
  await heading(page, 'shop.example.com')
  await page.getByRole('button', { name: 'Delete' }).click()
  const dialog = page.getByRole('dialog', { name: 'Delete shop.example.com?' })
  await dialog.waitFor()
  await page.keyboard.press('Escape')
  await dialog.waitFor({ state: 'detached' })
  assert.equal((await api.get(`/api/domains/${domain.id}`)).status, 200)
  await page.getByRole('button', { name: 'Delete' }).click()
  await dialog.getByRole('button', { name: 'Delete domain' }).click()
  await heading(page, 'Domains')
  await page.getByText('No sender domains yet').waitFor()
  assert.equal((await api.get(`/api/domains/${domain.id}`)).status, 404)

  assert.deepEqual(problems, [], 'no CSP violation and no script error')
})
