// The browser tests' common parts: Debian's chromium (headless, through playwright-core), a free port for
// svc so that PUBLIC_URL can name the origin the browser uses, and waiting for a page's heading.
import { existsSync } from 'node:fs'
import net from 'node:net'
import { chromium, type Browser, type Page } from 'playwright-core'

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

/** The page's main heading, once the page has settled on it. */
export async function heading (page: Page, text: string | RegExp): Promise<void> {
  await page.locator('main h1').filter({ hasText: text }).waitFor()
}
