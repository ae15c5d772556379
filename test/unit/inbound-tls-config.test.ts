// INBOUND_TLS_CERT / INBOUND_TLS_KEY and INBOUND_IPV4_PREFIX as loadConfig reads them: a mistake stops the
// start with a line that names the variable, and never quotes a key.
import assert from 'node:assert/strict'
import { generateKeyPairSync } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import { loadConfig } from '../../config/index.js'
import { configProblems } from '../helpers/config.js'

const TLS_DIR = new URL('../../../test/fixtures/tls/', import.meta.url)
const CERT = fileURLToPath(new URL('relay-cert.pem', TLS_DIR))
const KEY = fileURLToPath(new URL('relay-key.pem', TLS_DIR))

describe('inbound listener configuration', () => {
  test('without INBOUND_TLS_*: no STARTTLS; IPv4 counted per address', () => {
    const c = loadConfig({})
    assert.equal(c.mail.inbound.tls, undefined)
    assert.equal(c.mail.inbound.ipv4Prefix, 32)
    assert.equal(loadConfig({ INBOUND_IPV4_PREFIX: '24' }).mail.inbound.ipv4Prefix, 24)
    assert.match(configProblems({ INBOUND_IPV4_PREFIX: '8' })[0]!, /^INBOUND_IPV4_PREFIX must be a prefix length from 16 to 32/)
  })

  test('a certificate and its key: taken', () => {
    assert.deepEqual(loadConfig({ INBOUND_TLS_CERT: CERT, INBOUND_TLS_KEY: KEY }).mail.inbound.tls, { certFile: CERT, keyFile: KEY })
  })

  test('one without the other, a missing file, a file that is not a certificate, a key of another certificate: refused by name', (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-tls-'))
    t.after(() => rmSync(dir, { recursive: true, force: true }))
    assert.deepEqual(configProblems({ INBOUND_TLS_CERT: CERT }), ['INBOUND_TLS_CERT and INBOUND_TLS_KEY must be set together (only INBOUND_TLS_CERT is set)'])
    assert.deepEqual(configProblems({ INBOUND_TLS_KEY: KEY }), ['INBOUND_TLS_CERT and INBOUND_TLS_KEY must be set together (only INBOUND_TLS_KEY is set)'])

    const missing = join(dir, 'nothing.pem')
    assert.deepEqual(configProblems({ INBOUND_TLS_CERT: missing, INBOUND_TLS_KEY: KEY }), [`INBOUND_TLS_CERT must be a readable file (${JSON.stringify(missing)}: ENOENT)`])

    // The key given as the certificate: named, and the key's text is not in the line.
    const swapped = configProblems({ INBOUND_TLS_CERT: KEY, INBOUND_TLS_KEY: KEY })
    assert.deepEqual(swapped, [`INBOUND_TLS_CERT must be a PEM certificate (${JSON.stringify(KEY)} is not one)`])

    const other = join(dir, 'other-key.pem')
    writeFileSync(other, generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }))
    const mismatch = configProblems({ INBOUND_TLS_CERT: CERT, INBOUND_TLS_KEY: other })
    assert.deepEqual(mismatch, [`INBOUND_TLS_KEY must be the PEM private key of INBOUND_TLS_CERT (${JSON.stringify(other)} is not a key, or not this certificate's)`])
    assert.ok(!mismatch.join('\n').includes('PRIVATE KEY'))

    const garbage = join(dir, 'garbage.pem')
    writeFileSync(garbage, 'not a key\n')
    assert.match(configProblems({ INBOUND_TLS_CERT: CERT, INBOUND_TLS_KEY: garbage })[0]!, /^INBOUND_TLS_KEY must be the PEM private key of INBOUND_TLS_CERT/)
  })
})
