// The attachments of a send (or of each item of a batch), checked as a whole before anything is stored
// (src/domain/attachments.ts holds the rules): problems with a field are validation errors (400) named
// with the rest of the send's; then an allowance passed is 413 payload_too_large, then a program 422
// attachment_not_allowed, each naming every item and file concerned. Nothing is stored for any of them.
import { AttachmentNotAllowed, PayloadTooLarge, type ErrorDetail } from '../errors.js'
import {
  DEFAULT_ATTACHMENTS_MAX_BYTES, MAX_ATTACHMENTS, checkAttachments, type AttachmentInput, type AttachmentLimits, type AttachmentMeta,
  type DecodedAttachment,
} from '../domain/attachments.js'
import type { AttachmentContent } from '../store/emails.js'

export const DEFAULT_ATTACHMENT_LIMITS: AttachmentLimits = { maxBytes: DEFAULT_ATTACHMENTS_MAX_BYTES, maxCount: MAX_ATTACHMENTS }

export interface CheckedAttachments {
  /** Per item, in the order of the items: its attachments decoded (empty when it has none or was refused). */
  byItem: DecodedAttachment[][]
  /** Problems with a field, to answer with the send's other validation errors. */
  invalid: ErrorDetail[]
  /** Throws 413 or 422 when an item passed its allowance or attached a program; call once `invalid` is empty. */
  refuse(): void
}

/** Checks every item's attachments; `prefix(i)` is where item i's fields are in the request (`body`, `body[3]`). */
export function checkSendAttachments (
  items: Array<{ attachments?: AttachmentInput[] }>, limits: AttachmentLimits, prefix: (i: number) => string,
): CheckedAttachments {
  const byItem: DecodedAttachment[][] = []
  const invalid: ErrorDetail[] = []
  const tooLarge: ErrorDetail[] = []
  const notAllowed: ErrorDetail[] = []
  items.forEach((item, i) => {
    const list = typeof item === 'object' && item !== null && Array.isArray(item.attachments) ? item.attachments : undefined
    const checked = checkAttachments(list, limits)
    if ('attachments' in checked) {
      byItem.push(checked.attachments)
      return
    }
    byItem.push([])
    for (const p of checked.problems) {
      const detail = { path: `${prefix(i)}.${p.path}`, message: p.message }
      if (p.kind === 'invalid') invalid.push(detail)
      else if (p.kind === 'too_large') tooLarge.push(detail)
      else notAllowed.push(detail)
    }
  })
  return {
    byItem,
    invalid,
    refuse () {
      if (tooLarge.length > 0) {
        throw PayloadTooLarge(`The attachments pass an email's allowance of ${limits.maxBytes.toLocaleString('en-US')} bytes ` +
          `(or ${limits.maxCount} files); nothing was sent`, tooLarge)
      }
      if (notAllowed.length > 0) {
        throw AttachmentNotAllowed('Programs and scripts are refused as attachments, as mailbox providers refuse them; nothing was sent', notAllowed)
      }
    },
  }
}

/** The facts the email keeps, and the bytes to store with it, of one email's decoded attachments. */
export function attachmentRecords (emailId: string, decoded: DecodedAttachment[] | undefined): { facts: AttachmentMeta[]; contents: AttachmentContent[] } {
  const list = decoded ?? []
  return {
    facts: list.map((a) => a.meta),
    contents: list.map((a, part) => ({ emailId, part, content: a.content })),
  }
}
