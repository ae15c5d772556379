// The dashboard (web/, plain modules, no build step) repeats two of the service's rules so that mistakes
// show while typing: the event types and the sender-domain name check. This keeps each the same as the
// service's, so there is one rule, shown in two places.
import assert from 'node:assert/strict'
import path from 'node:path'
import { test } from 'node:test'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { normaliseDomainName } from '../../src/app/domains.js'
import { EVENT_TYPES } from '../../src/domain/events.js'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
const web = async (file: string): Promise<any> => await import(pathToFileURL(path.join(ROOT, 'web/js', file)).href)

test('the dashboard lists the event types the service has, in its order', async () => {
  const { EVENT_TYPES: shown, SENT_EVENT_TYPES } = await web('events.js')
  assert.deepEqual(shown, [...EVENT_TYPES])
  assert.deepEqual(SENT_EVENT_TYPES, EVENT_TYPES.filter((t) => t !== 'email.received'))
})

test('the dashboard accepts a sender-domain name exactly when the service does', async () => {
  const { checkDomainName } = await web('pages/domains.js')
  const names = [
    'example.com', 'mail.example.co.uk', 'EXAMPLE.com', 'example.com.', 'xn--bcher-kva.example', 'bücher.example',
    'a-b.example', 'localhost', 'example', '1.2.3.4', 'example.123', '-bad.example', 'bad-.example', 'a..b.example',
    'https://example.com', 'example.com/path', 'me@example.com', 'exa mple.com', `${'a'.repeat(64)}.example`,
    `${'a'.repeat(63)}.example`, `${'abcdefghi.'.repeat(26)}com`, '', '   ',
  ]
  for (const name of names) {
    const server = 'name' in normaliseDomainName(name)
    const dashboard = checkDomainName(name) === ''
    assert.equal(dashboard, server, `${JSON.stringify(name)}: the service ${server ? 'accepts' : 'refuses'} it, the dashboard ${dashboard ? 'accepts' : 'refuses'} it`)
  }
})
