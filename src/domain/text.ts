// What text a client may put where it will be printed or written into a header line: the one rule about
// control characters. C0 (CR and LF among them), DEL and C1 (U+0080–U+009F, NEL among them) control
// characters, and the Unicode line and paragraph separators (U+2028, U+2029), which some readers take for
// line breaks. A tab is allowed where the caller says so (header values may hold one).

const CONTROL_CLASS = '\\u0000-\\u0008\\u000A-\\u001F\\u007F-\\u009F\\u2028\\u2029'
const CONTROL = new RegExp(`[${CONTROL_CLASS}\\u0009]`)
const CONTROL_EXCEPT_TAB = new RegExp(`[${CONTROL_CLASS}]`)

/** A JSON Schema pattern (for names shown in lists and logs): one or more characters, none of them control characters, tab included. */
export const NO_CONTROL_CHARACTERS_PATTERN = `^[^${CONTROL_CLASS}\\u0009]+$`

/** True when `text` holds a control character (see above); `allowTab` lets a horizontal tab through. */
export function hasControlCharacter (text: string, opts: { allowTab?: boolean } = {}): boolean {
  return (opts.allowTab === true ? CONTROL_EXCEPT_TAB : CONTROL).test(text)
}
