import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import {
  createTrackingToken,
  instrumentHtml,
  unsubscribeHeaders,
  verifyTrackingToken,
  type TrackingClaims,
} from '../../src/mail/tracking.js'

const SECRET = 'test-secret-0123456789abcdef'
const NOW = 1_800_000_000
const EXP = NOW + 3600
const PUBLIC_URL = 'https://mail.example.com'

const opts = { publicUrl: PUBLIC_URL, secret: SECRET, emailId: 'em_42', recipient: 'alice@example.net', expiresAt: EXP }

function click(url: string): TrackingClaims {
  return { kind: 'click', emailId: 'em_42', recipient: 'alice@example.net', url, exp: EXP }
}

/** Flips one character to another base64url character. */
function flip(s: string, at: number): string {
  const c = s[at] === 'A' ? 'B' : 'A'
  return s.slice(0, at) + c + s.slice(at + 1)
}

/** The click destinations encoded in the rewritten links, in document order. */
function clickTargets(html: string): string[] {
  return [...html.matchAll(/href\s*=\s*"https:\/\/mail\.example\.com\/t\/c\/([^"]+)"/gi)].map((m) => {
    const claims = verifyTrackingToken(SECRET, m[1] ?? '', 'click', NOW)
    assert.ok(claims, `link token ${m[1]} does not verify`)
    return claims.url ?? ''
  })
}

describe('tracking tokens', () => {
  test('round trip for every kind', () => {
    for (const claims of [
      { kind: 'open', emailId: 'em_1', recipient: 'a@example.net', exp: EXP },
      { kind: 'unsubscribe', emailId: 'em_1', recipient: 'a@example.net', exp: EXP },
      click('https://example.com/pricing?plan=pro&ref=mail#top'),
    ] satisfies TrackingClaims[]) {
      const token = createTrackingToken(SECRET, claims)
      assert.match(token, /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/, 'URL-safe without escaping')
      assert.deepEqual(verifyTrackingToken(SECRET, token, claims.kind, NOW), claims)
    }
  })

  test('a tampered payload is rejected, including a payload re-signed with the old MAC', () => {
    const token = createTrackingToken(SECRET, click('https://example.com/'))
    const [payload, sig] = token.split('.') as [string, string]
    assert.equal(verifyTrackingToken(SECRET, `${flip(payload, 5)}.${sig}`, 'click', NOW), null)

    // Swap in a payload pointing somewhere else, keeping the original signature.
    const forged = Buffer.from(
      JSON.stringify({ k: 'c', e: 'em_42', r: 'alice@example.net', u: 'https://evil.example/', x: EXP }),
    ).toString('base64url')
    assert.equal(verifyTrackingToken(SECRET, `${forged}.${sig}`, 'click', NOW), null)
  })

  test('a tampered MAC is rejected, including another spelling of the same bytes', () => {
    const token = createTrackingToken(SECRET, click('https://example.com/'))
    const [payload, sig] = token.split('.') as [string, string]
    assert.equal(verifyTrackingToken(SECRET, `${payload}.${flip(sig, 0)}`, 'click', NOW), null)
    assert.equal(verifyTrackingToken(SECRET, `${payload}.${sig.slice(0, -1)}`, 'click', NOW), null)
    // The last character of 32 bytes in base64 carries two unused bits; a lenient decoder
    // maps both spellings to the same MAC.
    const last = sig.at(-1) ?? 'A'
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'
    const sibling = alphabet[alphabet.indexOf(last) ^ 1] ?? 'A'
    const respelled = `${payload}.${sig.slice(0, -1)}${sibling}`
    assert.deepEqual(Buffer.from(respelled.split('.')[1] ?? '', 'base64url'), Buffer.from(sig, 'base64url'))
    assert.equal(verifyTrackingToken(SECRET, respelled, 'click', NOW), null)
  })

  test('a token signed with another secret is rejected: a forged click is never an open redirect', () => {
    const forged = createTrackingToken('attacker-secret', click('https://evil.example/phish'))
    assert.equal(verifyTrackingToken(SECRET, forged, 'click', NOW), null)
  })

  test('a token of another kind is rejected', () => {
    const open = createTrackingToken(SECRET, { kind: 'open', emailId: 'em_1', recipient: 'a@example.net', exp: EXP })
    assert.equal(verifyTrackingToken(SECRET, open, 'unsubscribe', NOW), null)
    assert.equal(verifyTrackingToken(SECRET, open, 'click', NOW), null)
    assert.ok(verifyTrackingToken(SECRET, open, 'open', NOW))
  })

  test('an expired token is rejected from its exp second on', () => {
    const token = createTrackingToken(SECRET, click('https://example.com/'))
    assert.ok(verifyTrackingToken(SECRET, token, 'click', EXP - 1))
    assert.equal(verifyTrackingToken(SECRET, token, 'click', EXP), null)
    assert.equal(verifyTrackingToken(SECRET, token, 'click', EXP + 86_400), null)
  })

  test('malformed tokens are rejected without throwing', () => {
    const token = createTrackingToken(SECRET, click('https://example.com/'))
    for (const bad of ['', '.', 'abc', `${token}.x`, `.${token.split('.')[1]}`, token.replace('.', '..'), `${token}=`, 'a b.c', 'x'.repeat(10_000)]) {
      assert.equal(verifyTrackingToken(SECRET, bad, 'click', NOW), null, JSON.stringify(bad.slice(0, 40)))
    }
  })

  test('a click token can only be made for an http(s) URL', () => {
    assert.throws(() => createTrackingToken(SECRET, click('javascript:alert(1)')))
    assert.throws(() => createTrackingToken(SECRET, { kind: 'click', emailId: 'em_1', recipient: 'a@x.y', exp: EXP }))
  })
})

describe('instrumentHtml', () => {
  test('rewrites double-, single- and un-quoted hrefs, keeping the other attributes', () => {
    const html =
      '<a href="https://example.com/a" class="btn">A</a> ' +
      "<a target='_blank' href='https://example.com/b'>B</a> " +
      '<A HREF=http://example.com/c>C</A> ' +
      '<a title="x > y" href = "https://example.com/d">D</a>'
    const out = instrumentHtml(html, { ...opts, trackOpens: false })
    assert.deepEqual(clickTargets(out), [
      'https://example.com/a',
      'https://example.com/b',
      'http://example.com/c',
      'https://example.com/d',
    ])
    assert.match(out, /<a href="[^"]+" class="btn">A<\/a>/)
    assert.match(out, /<a target='_blank' href="[^"]+">B<\/a>/)
    assert.match(out, /<a title="x > y" href = "[^"]+">D<\/a>/)
    assert.doesNotMatch(out, /example\.com\/[abcd]/)
  })

  test('decodes entities so the redirect goes where the author meant', () => {
    const html =
      '<a href="https://example.com/s?a=1&amp;b=2&#38;c=3&#x26;d=4">x</a>' +
      '<a href="https://example.com/s?q=&quot;hi&quot;&copy=5">y</a>' +
      '<a href="  https://example.com/trim  ">z</a>'
    assert.deepEqual(clickTargets(instrumentHtml(html, { ...opts, trackOpens: false })), [
      'https://example.com/s?a=1&b=2&c=3&d=4',
      'https://example.com/s?q="hi"&copy=5',
      'https://example.com/trim',
    ])
  })

  test('leaves mailto:, tel:, anchors, relative links and our own unsubscribe link alone', () => {
    const unsub = unsubscribeHeaders(opts)['List-Unsubscribe']?.slice(1, -1) ?? ''
    const untouched =
      '<a href="mailto:help@example.com?subject=Hi&amp;body=x">mail</a>' +
      '<a href="tel:+15551234567">call</a>' +
      '<a href="#section-2">jump</a>' +
      '<a href="/relative/path">rel</a>' +
      '<a href="page.html">page</a>' +
      '<a href="javascript:void(0)">js</a>' +
      '<a name="anchor">no href</a>' +
      `<a href="${unsub}">Unsubscribe</a>` +
      '<abbr title="https://example.com/not-a-link">abbr</abbr>'
    assert.equal(instrumentHtml(untouched, { ...opts, trackOpens: false }), untouched)
  })

  test('rewrites many links, each to its own destination', () => {
    const urls = Array.from({ length: 60 }, (_, i) => `https://example.com/item/${i}?utm=mail&amp;n=${i}`)
    const html = `<html><body>${urls.map((u, i) => `<p><a href="${u}">item ${i}</a></p>`).join('\n')}</body></html>`
    const targets = clickTargets(instrumentHtml(html, opts))
    assert.deepEqual(targets, urls.map((u) => u.replace('&amp;', '&')))
  })

  test('injects one open pixel just before </body>, whose token identifies the email and recipient', () => {
    const out = instrumentHtml('<html><body><p>Hi</p></BODY></html>', opts)
    const m = /<p>Hi<\/p><img src="https:\/\/mail\.example\.com\/t\/o\/([^"]+)" width="1" height="1" alt="" style="display:none"><\/BODY><\/html>$/.exec(out)
    assert.ok(m, out)
    assert.deepEqual(verifyTrackingToken(SECRET, m[1] ?? '', 'open', NOW), {
      kind: 'open',
      emailId: 'em_42',
      recipient: 'alice@example.net',
      exp: EXP,
    })
  })

  test('appends the pixel when there is no body tag; a trailing slash on publicUrl does not double up', () => {
    const out = instrumentHtml('<p>Hi</p>', { ...opts, publicUrl: `${PUBLIC_URL}/` })
    assert.match(out, /^<p>Hi<\/p><img src="https:\/\/mail\.example\.com\/t\/o\/[^"]+"[^>]*>$/)
  })

  test('trackOpens and trackClicks can each be turned off', () => {
    const html = '<body><a href="https://example.com/">x</a></body>'
    assert.equal(instrumentHtml(html, { ...opts, trackOpens: false, trackClicks: false }), html)
    const opensOnly = instrumentHtml(html, { ...opts, trackClicks: false })
    assert.match(opensOnly, /href="https:\/\/example\.com\/"/)
    assert.match(opensOnly, /\/t\/o\//)
    const clicksOnly = instrumentHtml(html, { ...opts, trackOpens: false })
    assert.doesNotMatch(clicksOnly, /\/t\/o\//)
    assert.deepEqual(clickTargets(clicksOnly), ['https://example.com/'])
  })

  test('an unterminated tag leaves the rest of the document as written', () => {
    const html = '<a href="https://example.com/1">ok</a><a href="https://example.com/2'
    const out = instrumentHtml(html, { ...opts, trackOpens: false })
    assert.deepEqual(clickTargets(out), ['https://example.com/1'])
    assert.ok(out.endsWith('<a href="https://example.com/2'))
  })
})

describe('unsubscribeHeaders', () => {
  test('RFC 8058 one-click headers whose token identifies the email and recipient', () => {
    const headers = unsubscribeHeaders(opts)
    assert.deepEqual(Object.keys(headers).sort(), ['List-Unsubscribe', 'List-Unsubscribe-Post'])
    assert.equal(headers['List-Unsubscribe-Post'], 'List-Unsubscribe=One-Click')
    const m = /^<https:\/\/mail\.example\.com\/t\/u\/([A-Za-z0-9_.-]+)>$/.exec(headers['List-Unsubscribe'] ?? '')
    assert.ok(m, headers['List-Unsubscribe'])
    assert.deepEqual(verifyTrackingToken(SECRET, m[1] ?? '', 'unsubscribe', NOW), {
      kind: 'unsubscribe',
      emailId: 'em_42',
      recipient: 'alice@example.net',
      exp: EXP,
    })
  })
})
