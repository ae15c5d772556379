// The text part of an email sent with html only: mailbox providers expect multipart/alternative, and a
// reader without html (or a screen reader, or a spam filter's) gets the words and the links as text.
//
// Written with htmlparser2's Tokenizer (svc's tracking rewrite reads html the same way, ./tracking.ts):
// a state machine that looks at each character once and keeps no element stack. The html-to-text
// package (installed with mailparser) builds a DOM first, with htmlparser2's Parser, whose work grows with
// the square of the nesting depth: 100,000 nested tags took 5 s, 200,000 took 22 s. Here the work is
// linear in the html whatever it holds, and the text is at most about as long as the html (each link's
// address is added once, and only where the link's words are not that address already).
import { QuoteType, Tokenizer } from 'htmlparser2'

/** Attribute values (a link's href, an image's alt) longer than this are left out. */
const MAX_ATTRIBUTE = 2048

/** Elements whose content is not text a reader sees. */
const HIDDEN = new Set(['script', 'style', 'head', 'title', 'template', 'svg', 'object', 'iframe', 'noframes'])
/** Elements that end a paragraph: a blank line around them. */
const PARAGRAPH = new Set(['p', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'blockquote', 'table', 'ul', 'ol', 'dl', 'pre', 'figure', 'address', 'form', 'fieldset'])
/** Elements that start on a line of their own. */
const LINE = new Set(['div', 'li', 'tr', 'dt', 'dd', 'section', 'article', 'header', 'footer', 'nav', 'aside', 'main', 'center', 'figcaption', 'caption', 'tbody', 'thead', 'tfoot', 'body', 'html'])

const WS = /[\t\n\f\r ]+/g

function isWs (c: number): boolean {
  return c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0c || c === 0x0d
}

/** What a link shows in text: its address, without mailto: for an email address. Null for links that go nowhere a reader can follow. */
function linkText (href: string): string | null {
  const url = href.trim()
  if (/^https?:\/\//i.test(url)) return url
  if (/^mailto:/i.test(url)) return url.slice(7).split('?')[0] ?? null
  if (/^tel:/i.test(url)) return url.slice(4)
  return null
}

/** The text of an html body: paragraphs and lines as the html sets them out, lists as "- " items, links as "words [address]". */
export function htmlToText (html: string): string {
  const out: string[] = []
  let written = 0 // characters in `out`
  let breaks = 0 // line breaks owed before the next text (0, 1 or 2)
  let space = false // a space owed before the next text
  let atStart = true // nothing written yet
  let hidden = 0 // depth inside hidden elements
  let pre = 0 // depth inside <pre>
  let cells = 0 // cells seen in the current table row

  // The start tag being read.
  let tag = ''
  let attr: 'href' | 'alt' | null = null
  let value = ''
  let tooLong = false
  let href: string | null = null
  let alt: string | null = null
  // The open link: where its words start in `out`, and its address.
  let link: { at: number; chars: number; href: string } | null = null

  const emit = (text: string) => {
    if (text === '') return
    if (!atStart) {
      if (breaks > 0) {
        out.push(breaks >= 2 ? '\n\n' : '\n')
        written += breaks >= 2 ? 2 : 1
      } else if (space) {
        out.push(' ')
        written += 1
      }
    }
    breaks = 0
    space = false
    atStart = false
    out.push(text)
    written += text.length
  }
  const lineBreak = (n: 1 | 2) => {
    if (n > breaks) breaks = n
    space = false
  }
  const text = (raw: string) => {
    if (hidden > 0 || raw === '') return
    if (pre > 0) {
      // As written, its line breaks kept (blank lines: one at most, as elsewhere).
      const lines = raw.split(/\r\n?|\n/)
      lines.forEach((line, i) => {
        if (i > 0 && !atStart) breaks = Math.min(breaks + 1, 2)
        space = false
        emit(line)
      })
      return
    }
    const lead = isWs(raw.charCodeAt(0))
    const trail = isWs(raw.charCodeAt(raw.length - 1))
    const words = raw.replace(WS, ' ').trim()
    if (lead) space = true
    emit(words)
    if (trail && words !== '') space = true
  }
  const name = (start: number, end: number): string => (end - start > 10 ? '' : html.slice(start, end).toLowerCase())

  const openTag = (selfClosing: boolean) => {
    const t = tag
    tag = ''
    if (HIDDEN.has(t)) {
      if (!selfClosing) hidden++
      return
    }
    if (hidden > 0) return
    // Each <br> ends a line; two make a blank one.
    if (t === 'br') { if (!atStart) { breaks = Math.min(breaks + 1, 2); space = false } return }
    if (t === 'hr') { lineBreak(2); emit('----'); lineBreak(2); return }
    if (PARAGRAPH.has(t)) lineBreak(2)
    else if (LINE.has(t)) lineBreak(1)
    if (t === 'pre' && !selfClosing) pre++
    if (t === 'tr') cells = 0
    if (t === 'td' || t === 'th') {
      if (cells++ > 0) space = true
    }
    if (t === 'li') { emit('-'); space = true }
    if (t === 'img' && alt !== null) {
      const words = alt.replace(WS, ' ').trim()
      if (words !== '') { space = space || !atStart; emit(words) }
    }
    if (t === 'a') {
      closeLink()
      const shown = href === null ? null : linkText(href)
      if (shown !== null && !selfClosing) link = { at: out.length, chars: written, href: shown }
    }
  }
  const closeLink = () => {
    if (link === null) return
    const { at, chars, href: address } = link
    link = null
    const length = written - chars
    // Its words, when they could be the address itself (compared only then: linear overall).
    const words = length <= address.length + 16 ? out.slice(at).join('').trim() : null
    if (words === address || words === `mailto:${address}`) return
    if (words === '') { emit(address); return }
    space = true
    emit(`[${address}]`)
  }

  const tokenizer = new Tokenizer({ decodeEntities: true }, {
    onopentagname (start, end) {
      tag = name(start, end)
      attr = null
      href = null
      alt = null
    },
    onattribname (start, end) {
      const n = end - start === 4 || end - start === 3 ? html.slice(start, end).toLowerCase() : ''
      attr = (tag === 'a' && n === 'href' && href === null) ? 'href' : (tag === 'img' && n === 'alt' && alt === null) ? 'alt' : null
      value = ''
      tooLong = false
    },
    onattribdata (start, end) {
      if (attr === null || tooLong) return
      if (value.length + (end - start) > MAX_ATTRIBUTE) tooLong = true
      else value += html.slice(start, end)
    },
    onattribentity (codepoint) {
      if (attr === null || tooLong) return
      value += String.fromCodePoint(codepoint)
      if (value.length > MAX_ATTRIBUTE) tooLong = true
    },
    onattribend (quote) {
      if (attr === null) return
      if (quote !== QuoteType.NoValue && !tooLong) {
        if (attr === 'href') href = value
        else alt = value
      }
      attr = null
      value = ''
    },
    onopentagend () { openTag(false) },
    onselfclosingtag () { openTag(true) },
    onclosetag (start, end) {
      const t = name(start, end)
      if (HIDDEN.has(t)) {
        if (hidden > 0) hidden--
        return
      }
      if (hidden > 0) return
      if (t === 'a') closeLink()
      else if (t === 'pre') { if (pre > 0) pre--; lineBreak(2) }
      else if (PARAGRAPH.has(t)) lineBreak(2)
      else if (LINE.has(t)) lineBreak(1)
    },
    ontext (start, end) { text(html.slice(start, end)) },
    ontextentity (codepoint) {
      if (hidden > 0) return
      const c = String.fromCodePoint(codepoint)
      // A no-break space is a space to a reader of text.
      if (codepoint === 0xa0 || isWs(codepoint)) { if (!atStart) space = true; return }
      emit(c)
    },
    oncdata () {},
    oncomment () {},
    ondeclaration () {},
    onend () {},
    onprocessinginstruction () {},
  })
  tokenizer.write(html)
  tokenizer.end()
  closeLink()
  return out.join('')
}
