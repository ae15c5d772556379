import { Type } from 'typebox'

// The router already caps a path parameter at 8192 characters; the token's own checks do the rest.
export const TokenParams = Type.Object({ token: Type.String({ minLength: 1, maxLength: 8192 }) })

const tags = ['tracking']

export const OpenRoute = {
  tags, summary: 'Tracking pixel: a 1×1 transparent GIF; raises email.opened', params: TokenParams,
}
export const ClickRoute = {
  tags, summary: 'Tracked link: 302 to the original URL; raises email.clicked', params: TokenParams,
}
export const UnsubscribePageRoute = {
  tags, summary: 'Unsubscribe confirmation page (changes nothing; its button posts)', params: TokenParams,
}
export const UnsubscribeRoute = {
  tags, summary: 'Unsubscribe at once (RFC 8058 one-click); raises email.unsubscribed and suppresses the address', params: TokenParams,
}
