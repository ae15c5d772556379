// Receiving mail in the dashboard, in a real browser (Debian's chromium through playwright-core) against a
// real svc with its inbound SMTP listener and a DNS server on loopback: receiving is turned on from the
// domain's page, a message with an html part that tries to run a script and an attachment is mailed to
// the listener, and the Received page shows it: its verdicts, its text, its html as source (never
// rendered) and its attachment as a download; then it is deleted from there, after a confirmation.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import nodemailer from 'nodemailer'
import type { InboundMail } from '../../src/mail/inbound/listener.js'
import { chromiumMissing, freePort, heading, launchChromium, signUpInPage } from '../helpers/browser.js'
import { startDnsServer } from '../helpers/dns-server.js'
import { publishRecords } from '../helpers/domains.js'
import { startServer, uniqueEmail, PASSWORD } from '../helpers/server.js'

const skip = chromiumMissing("the Received page's browser test")

test('the Received page in chromium: receiving turned on from the domain, a message listed and shown, its html as source, deleted', { skip, timeout: 120_000 }, async (t) => {
  const dns = await startDnsServer(t)
  const port = await freePort()
  const origin = `http://127.0.0.1:${port}`
  const server = await startServer(t, {
    port, env: { PUBLIC_URL: origin, DNS_SERVERS: dns.server, INBOUND_SMTP_PORT: '0', INBOUND_SMTP_HOST: '127.0.0.1', INBOUND_MX_HOST: 'mx.svc.test' },
  })
  const browser = await launchChromium()
  t.after(() => browser.close())
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, baseURL: origin })
  const page = await context.newPage()
  page.setDefaultTimeout(20_000)
  const problems: string[] = []
  page.on('console', (m) => { if (m.type() === 'error' && !/status of (401|403|404)/.test(m.text())) problems.push(`console: ${m.text()}`) })
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`))
  page.on('dialog', (d) => { problems.push(`a dialog opened: ${d.message()}`); void d.dismiss() })

  const api = server.client()
  api.cookie = `svc_session=${await signUpInPage(page, context, uniqueEmail('received'), PASSWORD)}`

  // A verified domain (through the API), then receiving turned on in the page.
  const created = await api.post('/api/domains', { name: 'example.com' })
  publishRecords(dns, created.body.data.records)
  assert.equal((await api.post(`/api/domains/${created.body.data.id}/verify`)).body.data.status, 'verified')
  await page.goto(`/#/domains/${created.body.data.id}`)
  await heading(page, 'example.com')
  await page.getByRole('button', { name: 'Turn receiving on' }).click()
  await page.getByRole('button', { name: 'Turn receiving off' }).waitFor()
  const mx = page.locator('tr[data-purpose="receiving"]')
  assert.equal(await mx.locator('td[data-label="Type"]').innerText(), 'MX')
  assert.equal(await mx.locator('td[data-label="Value"] code').innerText(), 'mx.svc.test')
  assert.equal(await mx.locator('td[data-label="Required"]').innerText(), 'suggested')

  // Nothing yet.
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Received', exact: true }).click()
  await heading(page, 'Received')
  await page.getByText('No mail received yet').waitFor()

  // A message whose html tries to run a script and to open a dialog.
  const inbound = server.service.components.find((c) => c.name === 'inbound-smtp') as unknown as InboundMail
  const transport = nodemailer.createTransport({ host: '127.0.0.1', port: inbound.port, secure: false, ignoreTLS: true, logger: false })
  t.after(() => transport.close())
  await transport.sendMail({
    from: 'Customer <customer@customer.example>', to: 'help@example.com', subject: 'A question about my order',
    text: 'Where is my parcel?', html: '<p>Where is my parcel?</p><script>alert("owned")</script><img src=x onerror="alert(1)">',
    attachments: [{ filename: 'photo.png', content: Buffer.from([0x89, 0x50, 0x4e, 0x47]), contentType: 'image/png' }],
  })
  const id = (await api.get('/api/received')).body.data[0].id as string

  await page.reload()
  await heading(page, 'Received')
  const row = page.locator(`tr[data-received="${id}"]`)
  assert.equal(await row.locator('td[data-label="To"]').innerText(), 'help@example.com')
  await row.getByRole('link', { name: 'A question about my order' }).click()
  await heading(page, 'A question about my order')
  await page.locator('pre.message-text').first().getByText('Where is my parcel?').waitFor()
  await page.getByText('HTML source (not rendered)').click()
  assert.match(await page.locator('details pre.message-text').innerText(), /<script>alert\("owned"\)<\/script>/, 'the html is shown as text')
  assert.equal(await page.locator('main script, main img').count(), 0, 'nothing of the html became an element')
  const link = page.getByRole('link', { name: 'photo.png' })
  assert.equal(await link.getAttribute('href'), `/api/received/${encodeURIComponent(id)}/attachments/att_1`)
  assert.equal(await page.getByRole('link', { name: 'Download the raw message' }).getAttribute('href'), `/api/received/${encodeURIComponent(id)}/raw`)
  await page.locator('main').getByText('SPF').first().waitFor()

  // Delete: cancelled first (nothing happens), then confirmed; the list is empty and the bytes are free.
  await page.getByRole('button', { name: 'Delete', exact: true }).click()
  await page.getByRole('dialog').getByRole('button', { name: 'Cancel' }).click()
  assert.equal((await api.get(`/api/received/${id}`)).status, 200)
  await page.getByRole('button', { name: 'Delete', exact: true }).click()
  await page.getByRole('dialog').getByRole('button', { name: 'Delete message' }).click()
  await heading(page, 'Received')
  await page.getByText('No mail received yet').waitFor()
  assert.equal((await api.get(`/api/received/${id}`)).status, 404)
  assert.equal(await server.store.receivedBytes((await api.get('/api/account')).body.data.id), 0)

  assert.deepEqual(problems, [], 'no CSP violation, no script error, no dialog')
})
