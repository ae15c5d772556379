// What an attachment of a send may be, and what svc keeps of it. The rules run after the schema check
// (src/http/routes/emails/schema.ts bounds every string and the count): a file name is cleaned, a content
// type follows the name where none is given, the content is strict base64 within the email's allowance,
// and files that mailbox providers refuse (programs and scripts) are refused here, at the API, rather
// than in a bounce a day later. No I/O; tested in test/unit/attachments.test.ts.
import { createHash } from 'node:crypto'

/** An attachment as a send gives it. */
export interface AttachmentInput {
  filename: string
  /** The bytes, base64 (RFC 4648 §4: the standard alphabet, with padding, nothing else). */
  content: string
  contentType?: string
  /** Makes the attachment inline: the html names it `cid:<contentId>`. */
  contentId?: string
}

/** What an email keeps of each attachment, for as long as the email is kept (its bytes go earlier). */
export interface AttachmentMeta {
  filename: string
  contentType: string
  /** Decoded size in bytes. */
  size: number
  /** SHA-256 of the decoded bytes, lower-case hex. */
  sha256: string
  /** Present on an inline attachment. */
  contentId?: string
}

export interface DecodedAttachment {
  meta: AttachmentMeta
  content: Buffer
}

/** Attachments per email at most (the schema's bound as well). */
export const MAX_ATTACHMENTS = 20
/**
 * The decoded bytes of one email's attachments together, by default (ATTACHMENTS_MAX_BYTES). Base64 in
 * lines of 76 characters makes 7,000,000 bytes into about 9,580,000: with an ordinary html and text part,
 * the message stays under Postfix's default message_size_limit (10,240,000 bytes), the smallest limit of
 * the common relays (Gmail takes 25 MB, SES 40 MB: raise it for those).
 */
export const DEFAULT_ATTACHMENTS_MAX_BYTES = 7_000_000
/** The most ATTACHMENTS_MAX_BYTES may be set to: SES takes 40 MB messages, the largest of the common relays. */
export const MAX_ATTACHMENTS_MAX_BYTES = 50_000_000
/** One attachment's base64 at most, in characters: the largest allowance, encoded (the schema's bound). */
export const MAX_CONTENT_CHARS = Math.ceil(MAX_ATTACHMENTS_MAX_BYTES / 3) * 4
/** A file name at most this many characters, once cleaned (most file systems take 255). */
export const MAX_FILENAME_LENGTH = 255
/** A content id at most this many characters. */
export const MAX_CONTENT_ID_LENGTH = 200

/**
 * Extensions that Gmail refuses in any message (its published list of blocked file types), with the few
 * Outlook adds that are programs too (.reg, .scf, .ps1xml…): each is a program, a script, a shortcut or a
 * disk image that runs or mounts when opened. A message carrying one is bounced by those providers, so the
 * sender hears it here instead. Archives are not opened: Gmail also refuses an archive holding such a file.
 */
export const EXECUTABLE_EXTENSIONS: ReadonlySet<string> = new Set([
  'ade', 'adp', 'apk', 'appx', 'appxbundle', 'bat', 'cab', 'chm', 'cmd', 'com', 'cpl', 'diagcab', 'diagcfg', 'diagpack',
  'dll', 'dmg', 'ex', 'ex_', 'exe', 'hta', 'img', 'ins', 'iso', 'isp', 'jar', 'jnlp', 'js', 'jse', 'lib', 'lnk', 'mde',
  'mjs', 'msc', 'msi', 'msix', 'msixbundle', 'msp', 'mst', 'nsh', 'pif', 'ps1', 'scr', 'sct', 'shb', 'sys', 'vb', 'vbe',
  'vbs', 'vhd', 'vxd', 'wsc', 'wsf', 'wsh', 'xll',
  // Outlook's list adds these.
  'application', 'gadget', 'msh', 'msh1', 'msh2', 'mshxml', 'msh1xml', 'msh2xml', 'ps1xml', 'ps2', 'ps2xml', 'psc1', 'psc2',
  'reg', 'scf', 'ws',
])

/** Content types that say "a program" whatever the name says. */
export const EXECUTABLE_TYPES: ReadonlySet<string> = new Set([
  'application/x-msdownload', 'application/x-msdos-program', 'application/x-dosexec', 'application/x-executable',
  'application/vnd.microsoft.portable-executable', 'application/x-ms-installer', 'application/x-msi',
  'application/x-ms-shortcut', 'application/java-archive', 'application/x-java-archive', 'application/x-java-jnlp-file',
  'application/hta', 'application/x-bat', 'application/x-msdos-batch', 'application/vnd.ms-cab-compressed',
  'application/x-apple-diskimage', 'application/x-iso9660-image', 'application/vnd.android.package-archive',
])

/** The content type of a file by its extension: the kinds senders attach, and application/octet-stream for the rest. */
const TYPES: ReadonlyMap<string, string> = new Map([
  ['pdf', 'application/pdf'],
  ['png', 'image/png'], ['jpg', 'image/jpeg'], ['jpeg', 'image/jpeg'], ['gif', 'image/gif'], ['webp', 'image/webp'],
  ['svg', 'image/svg+xml'], ['bmp', 'image/bmp'], ['ico', 'image/vnd.microsoft.icon'], ['tif', 'image/tiff'], ['tiff', 'image/tiff'],
  ['heic', 'image/heic'], ['avif', 'image/avif'],
  ['txt', 'text/plain'], ['csv', 'text/csv'], ['htm', 'text/html'], ['html', 'text/html'], ['xml', 'application/xml'],
  ['json', 'application/json'], ['md', 'text/markdown'], ['ics', 'text/calendar'], ['vcf', 'text/vcard'], ['rtf', 'application/rtf'],
  ['eml', 'message/rfc822'],
  ['doc', 'application/msword'], ['dot', 'application/msword'],
  ['docx', 'application/vnd.openxmlformats-officedocument.wordprocessingml.document'],
  ['xls', 'application/vnd.ms-excel'], ['xlsx', 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet'],
  ['ppt', 'application/vnd.ms-powerpoint'], ['pptx', 'application/vnd.openxmlformats-officedocument.presentationml.presentation'],
  ['odt', 'application/vnd.oasis.opendocument.text'], ['ods', 'application/vnd.oasis.opendocument.spreadsheet'],
  ['odp', 'application/vnd.oasis.opendocument.presentation'], ['pages', 'application/vnd.apple.pages'],
  ['numbers', 'application/vnd.apple.numbers'], ['key', 'application/vnd.apple.keynote'], ['epub', 'application/epub+zip'],
  ['zip', 'application/zip'], ['gz', 'application/gzip'], ['tgz', 'application/gzip'], ['tar', 'application/x-tar'],
  ['7z', 'application/x-7z-compressed'], ['rar', 'application/vnd.rar'], ['bz2', 'application/x-bzip2'], ['xz', 'application/x-xz'],
  ['mp3', 'audio/mpeg'], ['wav', 'audio/wav'], ['ogg', 'audio/ogg'], ['m4a', 'audio/mp4'],
  ['mp4', 'video/mp4'], ['mov', 'video/quicktime'], ['webm', 'video/webm'],
  ['woff', 'font/woff'], ['woff2', 'font/woff2'], ['ttf', 'font/ttf'], ['otf', 'font/otf'],
  ['pkpass', 'application/vnd.apple.pkpass'],
])

export const DEFAULT_CONTENT_TYPE = 'application/octet-stream'

// Characters a file name loses: C0 and C1 controls (CR and LF among them), DEL, the line and paragraph
// separators, and the invisible direction marks and overrides, with which "invoice‮fdp.exe" shows as
// "invoiceexe.pdf". Also the characters no common file system takes (" * : < > ? |).
const UNWANTED_IN_NAME = /[\u0000-\u001F\u007F-\u009F\u2028\u2029\u200E\u200F\u202A-\u202E\u2066-\u2069\uFEFF"*:<>?|]/g

/**
 * A file name as it goes into the message: what follows the last `/` or `\` (no path), without control
 * or direction characters, the characters file systems refuse, and the dots and spaces at either end
 * (Windows drops trailing ones, so `run.exe.` is `run.exe` there). '' when nothing is left.
 */
export function cleanFilename (name: string): string {
  const base = name.slice(Math.max(name.lastIndexOf('/'), name.lastIndexOf('\\')) + 1)
  let clean = base.replace(/\t/g, ' ').replace(UNWANTED_IN_NAME, '').replace(/\s+/g, ' ')
  let start = 0
  let end = clean.length
  while (start < end && (clean[start] === ' ' || clean[start] === '.')) start++
  while (end > start && (clean[end - 1] === ' ' || clean[end - 1] === '.')) end--
  clean = clean.slice(start, end)
  // Cut by code point, keeping the extension when there is one.
  const points = [...clean]
  if (points.length <= MAX_FILENAME_LENGTH) return clean
  const ext = extensionOf(clean)
  const keep = ext.length > 0 && ext.length < 20 ? `.${ext}` : ''
  return points.slice(0, MAX_FILENAME_LENGTH - keep.length).join('') + keep
}

/** The extension, lower-case, without its dot; '' when the name has none. */
export function extensionOf (filename: string): string {
  const dot = filename.lastIndexOf('.')
  return dot <= 0 || dot === filename.length - 1 ? '' : filename.slice(dot + 1).toLowerCase()
}

/** The content type a file of this name is sent as when the send gives none. */
export function contentTypeFor (filename: string): string {
  return TYPES.get(extensionOf(filename)) ?? DEFAULT_CONTENT_TYPE
}

// type "/" subtype, RFC 6838 §4.2 restricted names; no parameters (svc writes those).
const CONTENT_TYPE = /^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}\/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$/i
// RFC 5322 atext, dots and one @ at most in spirit: what a `cid:` URL and a Content-ID carry without quoting.
const CONTENT_ID = /^[A-Za-z0-9!#$%&'*+/=?^_`{|}~.@-]+$/

/**
 * Why a mailbox provider would refuse this file, or null: its extension (the last one, after the name
 * was cleaned) or its content type says it is a program.
 */
export function executableReason (filename: string, contentType: string): string | null {
  const ext = extensionOf(filename)
  if (EXECUTABLE_EXTENSIONS.has(ext)) return `.${ext} files are programs or scripts, which mailbox providers refuse`
  if (EXECUTABLE_TYPES.has(contentType.toLowerCase())) return `${contentType.toLowerCase()} is a program type, which mailbox providers refuse`
  return null
}

/** Bytes encoded again at a time to compare with the text: 64 KiB of base64, never a whole file's copy. */
const CHECK_BLOCK = 48 * 1024

/**
 * The bytes of strict base64: the standard alphabet, padded to a multiple of 4 characters, no spaces or
 * line breaks, and the unused bits of the last character zero. Null for anything else. Linear: one
 * native decode, then the bytes encoded again a block at a time and compared with the text (Node's
 * decoder alone skips what it does not know, and takes the URL alphabet too).
 */
export function decodeBase64Strict (text: string): Buffer | null {
  if (text.length % 4 !== 0) return null
  const bytes = Buffer.from(text, 'base64')
  const padding = text.endsWith('==') ? 2 : text.endsWith('=') ? 1 : 0
  if (bytes.length !== (text.length / 4) * 3 - padding) return null
  for (let at = 0; at < bytes.length; at += CHECK_BLOCK) {
    const end = Math.min(at + CHECK_BLOCK, bytes.length)
    if (bytes.toString('base64', at, end) !== text.slice((at / 3) * 4, Math.ceil(end / 3) * 4)) return null
  }
  return bytes
}

export interface AttachmentLimits {
  /** Decoded bytes of one email's attachments together. */
  maxBytes: number
  /** Attachments per email. */
  maxCount: number
}

/** Why an attachment is refused; `kind` picks the answer (400, 413 or 422). Paths are relative to the send. */
export interface AttachmentProblem {
  path: string
  message: string
  kind: 'invalid' | 'too_large' | 'not_allowed'
}

function formatBytes (n: number): string {
  return n.toLocaleString('en-US')
}

/**
 * The attachments of one send, checked and decoded, or every problem with them. Sizes come before work:
 * a count over the limit, or base64 whose length alone passes the allowance, is refused before anything
 * is decoded.
 */
export function checkAttachments (list: AttachmentInput[] | undefined, limits: AttachmentLimits): { attachments: DecodedAttachment[] } | { problems: AttachmentProblem[] } {
  if (list === undefined || list.length === 0) return { attachments: [] }
  const problems: AttachmentProblem[] = []
  if (list.length > limits.maxCount) {
    return { problems: [{ path: 'attachments', message: `takes at most ${limits.maxCount} attachments`, kind: 'too_large' }] }
  }
  // Decoded, base64 is 3 bytes for every 4 characters (less its padding): the total is known before decoding.
  let declared = 0
  for (const a of list) declared += typeof a.content === 'string' ? Math.floor(a.content.length / 4) * 3 : 0
  const allowance = `an email takes at most ${formatBytes(limits.maxBytes)} bytes of attachments (ATTACHMENTS_MAX_BYTES)`
  if (declared - 2 * list.length > limits.maxBytes) {
    return { problems: [{ path: 'attachments', message: `together about ${formatBytes(declared)} bytes; ${allowance}`, kind: 'too_large' }] }
  }

  const out: DecodedAttachment[] = []
  const ids = new Set<string>()
  let total = 0
  list.forEach((a, i) => {
    const at = (field: string) => `attachments[${i}].${field}`
    const filename = cleanFilename(a.filename)
    if (filename === '') {
      problems.push({ path: at('filename'), message: 'must name a file (nothing is left once the path, control characters and trailing dots are removed)', kind: 'invalid' })
    }
    let contentType = DEFAULT_CONTENT_TYPE
    if (a.contentType !== undefined) {
      if (!CONTENT_TYPE.test(a.contentType)) {
        problems.push({ path: at('contentType'), message: 'must be a media type like application/pdf (type/subtype, no parameters)', kind: 'invalid' })
      } else contentType = a.contentType.toLowerCase()
    } else contentType = contentTypeFor(filename)
    let contentId: string | undefined
    if (a.contentId !== undefined) {
      if (a.contentId.length > MAX_CONTENT_ID_LENGTH || !CONTENT_ID.test(a.contentId)) {
        problems.push({ path: at('contentId'), message: 'must be letters, digits and !#$%&\'*+/=?^_`{|}~.@- only (no angle brackets), as the html names it after cid:', kind: 'invalid' })
      } else if (ids.has(a.contentId)) {
        problems.push({ path: at('contentId'), message: 'is given to another attachment of this email', kind: 'invalid' })
      } else {
        ids.add(a.contentId)
        contentId = a.contentId
      }
    }
    if (filename !== '') {
      const reason = executableReason(filename, contentType)
      if (reason !== null) problems.push({ path: at('filename'), message: `${JSON.stringify(filename)} is refused: ${reason}`, kind: 'not_allowed' })
    }
    const content = decodeBase64Strict(a.content)
    if (content === null) {
      problems.push({ path: at('content'), message: 'must be base64 (A–Z, a–z, 0–9, + and /, padded with = to a multiple of 4 characters, no spaces or line breaks)', kind: 'invalid' })
      return
    }
    total += content.length
    const meta: AttachmentMeta = {
      filename, contentType, size: content.length, sha256: createHash('sha256').update(content).digest('hex'),
    }
    if (contentId !== undefined) meta.contentId = contentId
    out.push({ meta, content })
  })
  if (total > limits.maxBytes) problems.push({ path: 'attachments', message: `together ${formatBytes(total)} bytes; ${allowance}`, kind: 'too_large' })
  return problems.length > 0 ? { problems } : { attachments: out }
}
