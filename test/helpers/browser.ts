// The browser tests' common parts: Debian's chromium (headless, through playwright-core), a free port for
// svc so that PUBLIC_URL can name the origin the browser uses, and waiting for a page's heading.
import { existsSync, mkdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core'

export const CHROMIUM = '/usr/bin/chromium'

/** false when chromium is there; else the reason the test is skipped, said plainly. */
export function chromiumMissing (what: string): false | string {
  return existsSync(CHROMIUM) ? false : `chromium is not installed at ${CHROMIUM} (apt-get install chromium); ${what} is skipped`
}

// A port nobody uses now, so that PUBLIC_URL can name the origin the browser will use.
export { freePort } from './ports.js'

/** Headless chromium without the background traffic this machine's closed network refuses. */
export async function launchChromium (): Promise<Browser> {
  return await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  })
}

/** Signs up in the page, so that the browser holds the session; returns the session cookie's value. */
export async function signUpInPage (page: Page, context: BrowserContext, email: string, password: string): Promise<string> {
  await page.goto('/#/signup')
  await heading(page, 'Create your svc account')
  await page.getByLabel('Email').fill(email)
  await page.getByLabel('Password').fill(password)
  await page.getByRole('button', { name: 'Sign up' }).click()
  await heading(page, 'Overview')
  const session = (await context.cookies()).find((c) => c.name === 'svc_session')
  if (session === undefined) throw new Error('no svc_session cookie after signing up')
  return session.value
}

/** The page's main heading, once the page has settled on it. */
export async function heading (page: Page, text: string | RegExp): Promise<void> {
  await page.locator('main h1').filter({ hasText: text }).waitFor()
}

// The README's screenshots are rewritten with UPDATE_SCREENSHOTS=1 (npm test leaves the tree clean
// otherwise: each run's ports and times differ); without it they go to the temp directory.
const SCREENSHOTS = process.env.UPDATE_SCREENSHOTS === '1'
  ? fileURLToPath(new URL('../../../docs/screenshots/', import.meta.url))
  : join(tmpdir(), 'svc-dashboard-screenshots')

/** A README screenshot (docs/screenshots/NAME): the page, not the last passing status message. */
export async function screenshot (page: Page, name: string, fullPage: boolean): Promise<void> {
  await page.evaluate("document.getElementById('toast').className = 'toast'")
  await page.mouse.move(0, 0)
  mkdirSync(SCREENSHOTS, { recursive: true })
  await page.screenshot({ path: join(SCREENSHOTS, name), fullPage, animations: 'disabled' })
}
