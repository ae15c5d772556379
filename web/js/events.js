// @ts-check
// The webhook event types, in the order the API lists them: the dashboard's one list of them.
// test/unit/web-rules.test.ts checks it against the service's (src/domain/events.ts).

export const EVENT_TYPES = ['email.sent', 'email.delivered', 'email.opened', 'email.clicked', 'email.bounced', 'email.complained', 'email.unsubscribed', 'email.received']

/** The types the overview counts (received mail has its own page). */
export const SENT_EVENT_TYPES = EVENT_TYPES.filter((t) => t !== 'email.received')
