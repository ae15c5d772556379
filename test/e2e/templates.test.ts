// The dashboard's Templates page in a real browser (Debian's chromium through playwright-core) against a
// real svc on loopback: save a template, preview it in its sandboxed frame, save a second version, read
// the first, delete it.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { chromiumMissing, freePort, heading, launchChromium, signUpInPage } from '../helpers/browser.js'
import { startServer, uniqueEmail, PASSWORD } from '../helpers/server.js'
import { waitFor } from '../helpers/wait.js'

const skip = chromiumMissing("the Templates page's browser test")

test('the Templates page in chromium: save, preview in a sandboxed frame, a second version, the first read back, delete', { skip, timeout: 120_000 }, async (t) => {
  const port = await freePort()
  const origin = `http://127.0.0.1:${port}`
  const server = await startServer(t, { port, env: { PUBLIC_URL: origin } })
  const browser = await launchChromium()
  t.after(() => browser.close())
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, baseURL: origin })
  const page = await context.newPage()
  page.setDefaultTimeout(20_000)
  const problems: string[] = []
  // The frame's script being blocked is logged as an error: expected, and looked for below.
  let blocked = false
  page.on('console', (m) => {
    if (m.type() !== 'error' || /status of (401|404|422)/.test(m.text())) return
    if (/Blocked script execution in 'about:srcdoc'.*sandboxed/.test(m.text())) blocked = true
    else problems.push(`console: ${m.text()}`)
  })
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`))
  const api = server.client()
  api.cookie = `svc_session=${await signUpInPage(page, context, uniqueEmail('templates'), PASSWORD)}`

  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Templates', exact: true }).click()
  await heading(page, 'Templates')
  await page.getByText('No templates yet').waitFor()

  const name = page.getByLabel('Name', { exact: true })
  await name.fill('has space')
  await name.blur()
  await page.getByText('Letters, digits, ., _ and -').waitFor()
  await name.fill('welcome')
  await page.getByLabel('Subject', { exact: true }).fill('Welcome {{ who }}')
  await page.getByLabel('HTML', { exact: true }).fill('<p>Hello {{ who }}</p><script>parent.document.title = "owned"</script>')
  await page.getByLabel('Declared variables (JSON)').fill('[{ "name": "who", "default": "there" }]')
  await page.getByRole('button', { name: 'Save template' }).click()

  await heading(page, 'welcome')
  const saved = (await api.get('/api/templates')).body.data[0]
  assert.ok(page.url().endsWith(`#/templates/${saved.id}`))

  // The preview: the variable escaped in the html, shown in a frame with every sandbox flag off.
  await page.getByLabel('Sample variables (JSON)').fill('{ "who": "<b>Ann</b>" }')
  await page.getByRole('button', { name: 'Preview' }).click()
  await page.getByText('Subject: Welcome <b>Ann</b>').waitFor()
  const frame = page.locator('iframe.message-frame')
  assert.equal(await frame.getAttribute('sandbox'), '')
  assert.equal(await frame.getAttribute('srcdoc'), '<p>Hello &lt;b&gt;Ann&lt;/b&gt;</p><script>parent.document.title = "owned"</script>')
  assert.equal(await page.frameLocator('iframe.message-frame').locator('p').innerText(), 'Hello <b>Ann</b>')
  assert.notEqual(await page.title(), 'owned', 'no script ran in the frame')
  await waitFor(() => 'chromium to report the frame\'s script blocked', () => blocked)

  // A second version; the first stays readable.
  await page.getByLabel('Subject', { exact: true }).fill('Welcome aboard, {{ who }}')
  await page.getByRole('button', { name: 'Save as a new version' }).click()
  await page.getByText('Version 2, made').waitFor()
  await page.locator('tr[data-version="1"]').getByRole('link', { name: '1' }).click()
  await page.getByText('Version 1 of 2').waitFor()
  assert.equal(await page.getByLabel('Subject', { exact: true }).inputValue(), 'Welcome {{ who }}')

  await page.getByRole('button', { name: 'Delete' }).click()
  await page.getByRole('dialog').getByRole('button', { name: 'Delete template' }).click()
  await heading(page, 'Templates')
  await page.getByText('No templates yet').waitFor()
  assert.deepEqual(problems, [])
})
