// Facts about an account's sender domains that the mailer needs as much as the use cases: where mail
// bounced back to a domain goes, how often a domain's records are looked at again, and the key that
// signs its mail.

/** The subdomain of a sender domain that its Return-Path (VERP) addresses live on. */
export const BOUNCE_SUBDOMAIN = 'bounces'

/** How often the background check looks again at a domain. */
export const RECHECK_INTERVAL_MS = 3_600_000

/** The host a domain's bounces are addressed to (its Return-Path). */
export function bounceHost (name: string): string {
  return `${BOUNCE_SUBDOMAIN}.${name}`
}

/** What the key to sign mail of one domain is, for the mailer only. */
export interface SigningKey {
  domainName: string
  keySelector: string
  privateKey: string
}
