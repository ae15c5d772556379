// The browser tests' common parts: Debian's chromium (headless, through playwright-core), a free port for
// svc so that PUBLIC_URL can name the origin the browser uses, and waiting for a page's heading.
import { existsSync } from 'node:fs'
import net from 'node:net'
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core'

export const CHROMIUM = '/usr/bin/chromium'

/** false when chromium is there; else the reason the test is skipped, said plainly. */
export function chromiumMissing (what: string): false | string {
  return existsSync(CHROMIUM) ? false : `chromium is not installed at ${CHROMIUM} (apt-get install chromium); ${what} is skipped`
}

/** A port nobody uses now, so that PUBLIC_URL can name the origin the browser will use. */
export async function freePort (): Promise<number> {
  const server = net.createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as net.AddressInfo
  await new Promise((resolve) => server.close(resolve))
  return port
}

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
