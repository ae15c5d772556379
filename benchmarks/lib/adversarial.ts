// The hostile `POST /api/send` bodies of the "adversarial sends" scenario: each one as large as svc's
// default body limit allows (1 MiB, BODY_LIMIT_BYTES), each aimed at one place where a request's content
// is processed (the tracking rewrite of html, address parsing, JSON parsing and validation, the MIME
// headers). Built from strings, never from nested objects (a million levels would overflow the stack).

/** svc's default BODY_LIMIT_BYTES, less a little so that every body is accepted by size. */
export const ADVERSARIAL_BODY_BYTES = 1024 * 1024 - 256

export interface AdversarialBody { shape: string; what: string; body: string }

const TO = '"to":"someone@example.com"'

/**
 * The largest `n` for which `make(n)` stays within `limit` bytes (every body here is ASCII: characters
 * are bytes). `make` must grow by the same number of bytes with each step of `n`.
 */
function fit (make: (n: number) => string, limit: number): { n: number; body: string } {
  const zero = make(0).length
  const step = make(1000).length - zero
  let n = Math.floor(((limit - zero) / step) * 1000)
  let body = make(n)
  while (body.length > limit) body = make(--n)
  return { n, body }
}

const k = (n: number) => n >= 10_000 ? `${Math.round(n / 1000)}k` : String(n)

/** Every shape, by name, in the order the scenario runs them. */
export const SHAPES: Record<string, (limit: number) => AdversarialBody> = {
  'html-href-whitespace': (limit) => {
    // The spaces sit inside the target, not at its end: a trim that backtracks is quadratic on that.
    const { n, body } = fit((n) => `{${TO},"subject":"Hello","html":"<p><a href=\\"https://example.com/${' '.repeat(n)}x\\">a link</a></p>"}`, limit)
    return { shape: 'html-href-whitespace', what: `html with one link whose href holds ${k(n)} spaces`, body }
  },
  'html-many-links': (limit) => {
    const { n, body } = fit((n) => `{${TO},"subject":"Hello","html":"${'<a href=http://a>'.repeat(n)}"}`, limit)
    return { shape: 'html-many-links', what: `html with ${k(n)} tiny http links (every one a tracked link)`, body }
  },
  'to-100k': () => {
    const n = 100_000
    return { shape: 'to-100k', what: `a \`to\` with ${k(n)} addresses`, body: `{"to":[${'"x@y.io",'.repeat(n - 1)}"x@y.io"],"subject":"Hello","text":"Hi"}` }
  },
  'nested-json': (limit) => {
    const { n, body } = fit((n) => `{${TO},"subject":"Hello","text":"Hi","tags":${'['.repeat(n)}${']'.repeat(n)}}`, limit)
    return { shape: 'nested-json', what: `JSON nested ${k(n)} levels deep (in \`tags\`)`, body }
  },
  'subject-1mib': (limit) => {
    const { n, body } = fit((n) => `{${TO},"subject":"${'S'.repeat(n)}","text":"Hi"}`, limit)
    return { shape: 'subject-1mib', what: `a subject of ${k(n)} characters`, body }
  },
  'html-huge-attribute': (limit) => {
    const { n, body } = fit((n) => `{${TO},"subject":"Hello","html":"<a href=\\"https://example.com/\\" title=\\"${'a'.repeat(n)}\\">x</a>"}`, limit)
    return { shape: 'html-huge-attribute', what: `html with a link whose title attribute holds ${k(n)} characters`, body }
  },
  'html-unclosed-tags': (limit) => {
    const { n, body } = fit((n) => `{${TO},"subject":"Hello","html":"${'<b><a href=\\"http://a/\\" x'.repeat(n)}"}`, limit)
    return { shape: 'html-unclosed-tags', what: `html of ${k(n)} unclosed tags, each a link whose attribute list never ends`, body }
  },
}
