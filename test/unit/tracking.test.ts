import { describe, test } from 'node:test'
import assert from 'node:assert/strict'
import {
  MAX_TRACKED_LINKS,
  MAX_TRACKED_URL_LENGTH,
  createTrackingToken,
  fillHtml,
  htmlTemplate,
  instrumentHtml,
  unsubscribeHeaders,
  verifyTrackingToken,
  type TrackingClaims,
} from '../../src/mail/tracking.js'
import { instrumentInWorker } from '../helpers/instrument-worker.js'

const SECRET = 'test-secret-0123456789abcdef'
const NOW = 1_800_000_000
const EXP = NOW + 3600
const PUBLIC_URL = 'https://mail.example.com'

const opts = { publicUrl: PUBLIC_URL, secret: SECRET, emailId: 'em_42', recipient: 'alice@example.net', expiresAt: EXP }

function click(url: string): TrackingClaims {
  return { kind: 'click', emailId: 'em_42', recipient: 'alice@example.net', url, exp: EXP }
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
      { kind: 'click', emailId: 'em_ü', recipient: 'zoë@example.net', url: 'https://example.com/ünïcode?q=✓', exp: EXP },
    ] satisfies TrackingClaims[]) {
      const token = createTrackingToken(SECRET, claims)
      assert.match(token, /^[A-Za-z0-9_-]+$/, 'URL-safe without escaping')
      assert.deepEqual(verifyTrackingToken(SECRET, token, claims.kind, NOW), claims)
    }
  })

  test('a token is opaque: no decoding of it shows the recipient, the email or the link', () => {
    const url = 'https://shop.example.com/item?id=7&ref=mail'
    const tokens = [
      createTrackingToken(SECRET, click(url)),
      createTrackingToken(SECRET, { kind: 'open', emailId: 'em_42', recipient: 'alice@example.net', exp: EXP }),
      unsubscribeHeaders(opts)['List-Unsubscribe'] ?? '',
    ]
    const secrets = ['alice@example.net', 'alice', 'example.net', url, 'shop.example.com', 'em_42']
    for (const token of tokens) {
      // Base64 of any alignment, base64url, the raw bytes as hex and as text.
      const views: string[] = [token]
      for (let skip = 0; skip < 4; skip++) {
        for (const enc of ['base64', 'base64url'] as const) {
          const raw = Buffer.from(token.slice(skip), enc)
          views.push(raw.toString('latin1'), raw.toString('utf8'), raw.toString('hex'), raw.toString('utf16le'))
        }
      }
      for (const view of views) {
        for (const s of secrets) {
          assert.ok(!view.toLowerCase().includes(s.toLowerCase()), `${s} is readable in a token`)
          assert.ok(!view.includes(Buffer.from(s).toString('hex')), `${s} is in a token as hex`)
        }
      }
    }
    // Two tokens for the same claims differ: equal links are not linkable across emails.
    assert.notEqual(createTrackingToken(SECRET, click(url)), createTrackingToken(SECRET, click(url)))
  })

  test('changing any character of a token makes it invalid', () => {
    const token = createTrackingToken(SECRET, click('https://example.com/'))
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'
    for (let i = 0; i < token.length; i++) {
      const other = alphabet[(alphabet.indexOf(token[i]!) + 17) % 64]!
      const altered = token.slice(0, i) + other + token.slice(i + 1)
      assert.equal(verifyTrackingToken(SECRET, altered, 'click', NOW), null, `character ${i}`)
    }
    assert.equal(verifyTrackingToken(SECRET, token.slice(0, -1), 'click', NOW), null, 'truncated')
    assert.equal(verifyTrackingToken(SECRET, token + 'A', 'click', NOW), null, 'extended')
  })

  test('another spelling of the same bytes is rejected', () => {
    const token = createTrackingToken(SECRET, click('https://example.com/'))
    // A base64 string whose length is not a multiple of 4 ends in a character with unused bits; a lenient
    // decoder maps both spellings to the same bytes. Make tokens until one has such an ending.
    let t = token
    for (let pad = 'a'; t.length % 4 === 0; pad += 'a') t = createTrackingToken(SECRET, click(`https://example.com/${pad}`))
    const last = t.at(-1) ?? 'A'
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'
    const sibling = alphabet[alphabet.indexOf(last) ^ 1] ?? 'A'
    const respelled = `${t.slice(0, -1)}${sibling}`
    assert.deepEqual(Buffer.from(respelled, 'base64url'), Buffer.from(t, 'base64url'))
    assert.ok(verifyTrackingToken(SECRET, t, 'click', NOW))
    assert.equal(verifyTrackingToken(SECRET, respelled, 'click', NOW), null)
  })

  test('a token sealed with another secret is rejected: a forged click is never an open redirect', () => {
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
    for (const bad of ['', '.', 'abc', `${token}.x`, `.${token}`, `${token}=`, 'a b.c', 'A'.repeat(200), 'x'.repeat(10_000), 'AgAA', `${token.slice(0, 20)}.${token.slice(20)}`]) {
      assert.equal(verifyTrackingToken(SECRET, bad, 'click', NOW), null, JSON.stringify(bad.slice(0, 40)))
    }
  })

  test('a click token can only be made for an http(s) URL of at most MAX_TRACKED_URL_LENGTH characters', () => {
    assert.throws(() => createTrackingToken(SECRET, click('javascript:alert(1)')))
    assert.throws(() => createTrackingToken(SECRET, { kind: 'click', emailId: 'em_1', recipient: 'a@x.y', exp: EXP }))
    const longest = `https://example.com/${'a'.repeat(MAX_TRACKED_URL_LENGTH - 20)}`
    assert.equal(verifyTrackingToken(SECRET, createTrackingToken(SECRET, click(longest)), 'click', NOW)?.url, longest)
    assert.throws(() => createTrackingToken(SECRET, click(`${longest}a`)))
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

/** The output with every tracking URL replaced by `T:c` (a click) or `T:o` (the pixel), to compare whole documents. */
function normalise(html: string): string {
  return html.replace(/https:\/\/mail\.example\.com\/t\/([co])\/[A-Za-z0-9_-]+/g, 'T:$1')
}

const PIXEL = '<img src="T:o" width="1" height="1" alt="" style="display:none">'
const MiB = 1024 * 1024

/** Whole-document equality without printing a megabyte when it fails. */
function sameDocument(actual: string, expected: string, what: string): void {
  if (actual === expected) return
  let i = 0
  while (i < actual.length && actual[i] === expected[i]) i++
  assert.fail(`${what}: differs at ${i}: ${JSON.stringify(actual.slice(i, i + 80))} vs ${JSON.stringify(expected.slice(i, i + 80))}`)
}

describe('instrumentHtml: what is and is not a link', () => {
  test('everything but the rewritten hrefs and the pixel stays byte for byte as written', () => {
    const html = '<!DOCTYPE html>\n<HTML><Head><Title>A &amp; B <a href="https://example.com/t"></Title>' +
      '<style>a[href="https://example.com/s"]{color:red}</style></Head>\n<BODY bgcolor=#fff>' +
      '<script>var x = "<a href=\'https://example.com/js\'>"</script>' +
      '<!-- <a href="https://example.com/commented">old</a> </body> -->' +
      '<p class=\'x\'>caf&eacute; &nbsp;<a\thref\n=\n\'https://example.com/a?x=1&amp;y=2\'\tid=a>A</a>' +
      '<a href="https://example.com/b" href="https://example.com/dup">B</a><br/>' +
      '<a href=https://example.com/c/>C</a><a HREF="https://example.com/d"/>' +
      '<svg><a href="https://example.com/svg"><text>S</text></a></svg>' +
      '<textarea><a href="https://example.com/ta"></textarea>' +
      '</BODY  >\n</HTML>\n'
    const out = instrumentHtml(html, opts)
    assert.deepEqual(clickTargets(out), [
      'https://example.com/a?x=1&y=2', 'https://example.com/b', 'https://example.com/c/', 'https://example.com/d', 'https://example.com/svg',
    ])
    const expected = html
      .replace("'https://example.com/a?x=1&amp;y=2'", '"T:c"')
      .replace('"https://example.com/b" ', '"T:c" ')
      .replace('https://example.com/c/>', '"T:c">')
      .replace('"https://example.com/d"/>', '"T:c"/>')
      .replace('"https://example.com/svg"', '"T:c"')
      .replace('</BODY  >', `${PIXEL}</BODY  >`)
    sameDocument(normalise(out), expected, 'document')
  })

  test("links inside Outlook's conditional comments are tracked; other comments are left alone", () => {
    const html = '<body><!--[if mso]><a href="https://example.com/outlook">O</a><![endif]-->' +
      '<!--[if !mso]><!--><a href="https://example.com/others">X</a><!--<![endif]-->' +
      '<!-- <a href="https://example.com/note"> --></body>'
    const out = instrumentHtml(html, opts)
    assert.deepEqual(clickTargets(out), ['https://example.com/outlook', 'https://example.com/others'])
    sameDocument(normalise(out), html
      .replace('"https://example.com/outlook"', '"T:c"')
      .replace('"https://example.com/others"', '"T:c"')
      .replace('</body>', `${PIXEL}</body>`), 'document')
  })

  test('the pixel goes before the last </body> that is a tag, not one in a comment or a script', () => {
    const html = '<body>a</body>b</body><!-- </body> --><script>"</body>"</script>c'
    sameDocument(normalise(instrumentHtml(html, opts)), `<body>a</body>b${PIXEL}</body><!-- </body> --><script>"</body>"</script>c`, 'document')
  })

  test(`a link longer than ${MAX_TRACKED_URL_LENGTH} characters is left as written`, () => {
    const longest = `https://example.com/${'a'.repeat(MAX_TRACKED_URL_LENGTH - 20)}`
    const html = `<a href="${longest}">ok</a><a href="${longest}b">too long</a><a href="  ${longest}  ">padded</a>`
    const out = instrumentHtml(html, { ...opts, trackOpens: false })
    assert.deepEqual(clickTargets(out), [longest, longest])
    sameDocument(normalise(out), `<a href="T:c">ok</a><a href="${longest}b">too long</a><a href="T:c">padded</a>`, 'document')
  })

  test(`at most ${MAX_TRACKED_LINKS} links are rewritten; the ones after stay as written`, () => {
    const links = Array.from({ length: MAX_TRACKED_LINKS + 5 }, (_, i) => `<a href="https://example.com/${i}">${i}</a>`)
    const out = instrumentHtml(links.join(''), { ...opts, trackOpens: false })
    assert.deepEqual(clickTargets(out), links.slice(0, MAX_TRACKED_LINKS).map((_, i) => `https://example.com/${i}`))
    assert.ok(out.endsWith(links.slice(MAX_TRACKED_LINKS).join('')))
  })
})

// A quadratic rewrite does not finish on these within the deadline (the old tokenizer took about 9 s on
// 100 KB of whitespace in one href and minutes on a megabyte); a linear one takes milliseconds. The
// rewrite runs in a worker thread so that a regression fails at the deadline instead of hanging the run;
// the assertions are on the output only.
describe('instrumentHtml: hostile megabytes', () => {
  const HOSTILE = { timeout: 60_000 }
  const ok = '<p><a href="https://example.com/ok">ok</a></p>'
  const okOut = '<p><a href="T:c">ok</a></p>'

  for (const size of [100_000, 300_000, MiB]) {
    test(`${size} characters of whitespace inside an href`, HOSTILE, async () => {
      const inside = `<a href="${' '.repeat(size)}https://example.com/x${'\n'.repeat(size)}y">x</a>`
      const leading = `<a href="${' \t'.repeat(size / 2)}">x</a>`
      const html = `<body>${ok}${inside}${leading}${ok}</body>`
      const out = await instrumentInWorker(html, opts)
      sameDocument(normalise(out), `<body>${okOut}${inside}${leading}${okOut}${PIXEL}</body>`, 'document')
      assert.deepEqual(clickTargets(out), ['https://example.com/ok', 'https://example.com/ok'])
    })
  }

  test('a megabyte of tiny links', HOSTILE, async () => {
    const tiny = '<a href=http://e.co>x</a>'
    const count = Math.floor(MiB / tiny.length)
    const out = await instrumentInWorker(tiny.repeat(count), opts)
    const rewritten = '<a href="T:c">x</a>'
    sameDocument(normalise(out), rewritten.repeat(MAX_TRACKED_LINKS) + tiny.repeat(count - MAX_TRACKED_LINKS) + PIXEL, 'document')
    assert.equal(clickTargets(out).length, MAX_TRACKED_LINKS)
  })

  test('a megabyte of 100k links that are not http(s)', HOSTILE, async () => {
    const html = '<a href=#>x</a>'.repeat(100_000).slice(0, MiB)
    sameDocument(normalise(await instrumentInWorker(html, opts)), html + PIXEL, 'document')
  })

  test('a megabyte of unclosed tags and unterminated attributes', HOSTILE, async () => {
    for (const html of [
      `${ok}${'<div '.repeat(MiB / 5)}`,
      `${ok}<a href="https://example.com/${'x'.repeat(MiB)}`,
      `${ok}${'<a href='.repeat(MiB / 8)}`,
      `${ok}${'<a'.repeat(MiB / 2)}`,
      `${ok}${'<a '.repeat(MiB / 3)}`,
      `${ok}<!--${'<a href="https://example.com/">'.repeat(MiB / 32)}`,
      `${ok}<!--[if mso]>${'<a href="https://example.com/">'.repeat(MiB / 32)}`,
      `${ok}<script>${'<a href="https://example.com/">'.repeat(MiB / 32)}`,
    ]) {
      const out = await instrumentInWorker(html, opts)
      sameDocument(normalise(out), okOut + html.slice(ok.length) + PIXEL, html.slice(ok.length, ok.length + 20))
    }
  })

  test('a megabyte inside one attribute: the other attributes and links still work', HOSTILE, async () => {
    const title = `<a title="${'y'.repeat(MiB)}" href="https://example.com/after">x</a>`
    const href = `<a href="https://example.com/${'z'.repeat(MiB)}">x</a>`
    const entities = `<a href="https://example.com/?${'&amp;'.repeat(MiB / 5)}">x</a>`
    const unquoted = `<a href=https://example.com/${'q'.repeat(MiB)}>x</a>`
    const html = `${title}${href}${entities}${unquoted}${ok}`
    const out = await instrumentInWorker(html, opts)
    sameDocument(normalise(out), `<a title="${'y'.repeat(MiB)}" href="T:c">x</a>${href}${entities}${unquoted}${okOut}${PIXEL}`, 'document')
  })

  test('deeply nested and mismatched tags', HOSTILE, async () => {
    const html = `${'<div><b>'.repeat(MiB / 16)}${ok}${'</i></span>'.repeat(MiB / 22)}${'</body>'.repeat(MiB / 14)}`
    const out = await instrumentInWorker(html, opts)
    const at = html.lastIndexOf('</body>')
    sameDocument(normalise(out), normalise(html.slice(0, at).replace(ok, okOut)) + PIXEL + '</body>', 'document')
    assert.deepEqual(clickTargets(out), ['https://example.com/ok'])
  })

  test('a megabyte of conditional comments full of links', HOSTILE, async () => {
    const cc = '<!--[if mso]><a href="https://e.co/">x</a><![endif]-->'
    const count = Math.floor(MiB / cc.length)
    const out = await instrumentInWorker(cc.repeat(count), { ...opts, trackOpens: false })
    const rewritten = '<!--[if mso]><a href="T:c">x</a><![endif]-->'
    sameDocument(normalise(out), rewritten.repeat(MAX_TRACKED_LINKS) + cc.repeat(count - MAX_TRACKED_LINKS), 'document')
  })
})

describe('htmlTemplate and fillHtml: scanned once, filled per recipient', () => {
  const html = '<html><body><p><a href="https://shop.example.com/a">A</a> and <a href="https://shop.example.com/b?x=1&amp;y=2">B</a></p></body></html>'

  test('each recipient\'s html is what instrumentHtml makes for them: the same links, tokens that name them', () => {
    const template = htmlTemplate(html, { publicUrl: PUBLIC_URL })
    assert.deepEqual(template.slots.map((s) => s.kind), ['click', 'click', 'open'])
    assert.equal(template.parts.length, template.slots.length + 1)
    for (const recipient of ['alice@example.net', 'bob@example.net']) {
      const filled = fillHtml(template, { ...opts, recipient })
      assert.deepEqual(clickTargets(filled), ['https://shop.example.com/a', 'https://shop.example.com/b?x=1&y=2'])
      // Outside the tracked places, the html is byte for byte as written.
      const stripped = filled.replace(/"https:\/\/mail\.example\.com\/t\/c\/[^"]+"/g, 'L').replace(/<img [^>]+>/, '')
      assert.equal(stripped, html.replace(/"https:\/\/shop\.example\.com\/[^"]+"/g, 'L'))
      for (const m of filled.matchAll(/\/t\/[co]\/([A-Za-z0-9_-]+)/g)) {
        assert.equal(verifyTrackingToken(SECRET, m[1]!, m[0].startsWith('/t/c/') ? 'click' : 'open', NOW)?.recipient, recipient)
      }
      assert.equal(instrumentHtml(html, { ...opts, recipient }).replace(/\/t\/[co]\/[A-Za-z0-9_-]+/g, 'T'), filled.replace(/\/t\/[co]\/[A-Za-z0-9_-]+/g, 'T'))
    }
  })

  test('nothing to track: one part, no slots, the html as it is', () => {
    const template = htmlTemplate(html, { publicUrl: PUBLIC_URL, trackClicks: false, trackOpens: false })
    assert.deepEqual(template, { parts: [html], slots: [] })
    assert.equal(fillHtml(template, opts), html)
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
