// The results a received message's authentication checks (SPF, DKIM, DMARC, ARC) may have.
export const AUTH_RESULTS = ['pass', 'fail', 'softfail', 'neutral', 'none', 'temperror', 'permerror', 'policy'] as const
export type AuthResult = (typeof AUTH_RESULTS)[number]
