// How long the links inside a sent email work, and whose copy stands for the email when no recipient is named.

/** Tracking and unsubscribe links stop working this long after the email was accepted. */
export const TRACKING_TTL_MS = 180 * 24 * 3_600_000

/**
 * The email's first recipient (the first `to`, else the first there is): whose copy an attempt with no
 * pending recipient would be made for. Every recipient's own copy names them (src/mail/compose.ts).
 */
export function trackingRecipient (email: { recipients: ReadonlyArray<{ address: string }> }): string {
  return email.recipients[0]!.address
}
