import { Type, type Static } from 'typebox'
import { HEADERS, Success, Timestamp, component, errors } from '../../schemas.js'

export const PlanSchema = Type.Union([Type.Literal('free'), Type.Literal('pro')])

export const CredentialsSchema = Type.Object({
  email: Type.String({ format: 'email', maxLength: 254 }),
  password: Type.String({ minLength: 10, maxLength: 200 }),
}, { additionalProperties: false })
export type Credentials = Static<typeof CredentialsSchema>

export const AccountSchema = component('Account', Type.Object({
  id: Type.String(),
  email: Type.String(),
  plan: PlanSchema,
  createdAt: Timestamp,
}))

const Limits = Type.Object({ apiKeys: Type.Integer(), webhooks: Type.Integer(), domains: Type.Integer({ description: 'sender domains' }) })
const Password = Type.String({ minLength: 10, maxLength: 200 })

const SendingPeriod = Type.Object({
  used: Type.Integer({ description: 'recipients accepted in this period' }),
  limit: Type.Union([Type.Integer(), Type.Null()], { description: 'the quota; null: none (quotas off, or none for this period)' }),
  resetsAt: Timestamp,
})

export const AccountDetailSchema = component('AccountDetails', Type.Object({
  id: Type.String(),
  email: Type.String(),
  plan: PlanSchema,
  createdAt: Timestamp,
  limits: Limits,
  usage: Limits,
  sending: Type.Object({ day: SendingPeriod, month: SendingPeriod }, { description: 'Recipients accepted this UTC day and month, against the plan\'s quota' }),
  transport: Type.Union([Type.Literal('smtp'), Type.Literal('sandbox')], {
    description: 'where accepted emails go: smtp, the SMTP_URL relay; sandbox (SMTP_URL unset), nowhere: nothing leaves the machine, and every address but the simulator\'s is reported delivered',
  }),
}, { description: 'The account with its plan\'s limits and what it uses of them' }))

export const SignupRoute = {
  operationId: 'signUp',
  security: [],
  tags: ['accounts'],
  summary: 'Create an account and start a session',
  body: CredentialsSchema,
  description: 'In production signup admits the first account only (403 signup_closed after it) unless SIGNUP=open.',
  response: { 201: Success(AccountSchema, 'The account, created; the session cookie is set', HEADERS.setCookie), ...errors(400, 403, 409, 413, 415, 429) },
}

export const LoginRoute = {
  operationId: 'logIn',
  security: [],
  tags: ['accounts'],
  summary: 'Start a session (sets the svc_session cookie)',
  body: CredentialsSchema,
  description: 'Failed logins are limited per email and client address (growing waits after RATE_LIMIT_LOGIN_FAILURES) and per email ' +
    'from every address together (RATE_LIMIT_LOGIN_PER_EMAIL failed logins per 15 minutes); a right password counts toward neither.',
  response: {
    200: Success(AccountSchema, 'Logged in: the account; the session cookie is set', HEADERS.setCookie),
    ...errors(400, 401, 403),
    ...errors({
      429: 'rate_limited, with Retry-After: too many requests from this address, too many failed logins from this address for this email, ' +
        'or too many failed logins for this email from every address (the account-wide ceiling)',
    }),
  },
}

export const LogoutRoute = {
  operationId: 'logOut',
  tags: ['accounts'],
  summary: 'End the session',
  security: [{ session: [] }],
  response: { 200: Success(Type.Object({ loggedOut: Type.Literal(true) }), 'Logged out: the session is ended and its cookie cleared', HEADERS.clearCookie), ...errors(401, 403) },
}

export const AccountRoute = {
  operationId: 'getAccount',
  tags: ['accounts'],
  summary: 'The account, its plan, limits and usage',
  security: [{ session: [] }],
  response: { 200: Success(AccountDetailSchema, 'The account'), ...errors(401, 403) },
}

export const ChangePasswordRoute = {
  operationId: 'changePassword',
  tags: ['accounts'],
  summary: 'Change the password; every other session of the account ends',
  security: [{ session: [] }],
  body: Type.Object({ currentPassword: Password, newPassword: Password }, { additionalProperties: false }),
  response: {
    200: Success(Type.Object({ changed: Type.Literal(true), sessionsEnded: Type.Integer() }), 'The password is changed; how many other sessions ended'),
    ...errors({ 401: 'No session, or the current password is wrong (invalid_credentials)' }),
    ...errors(403, 429),
  },
}

export const EndSessionsRoute = {
  operationId: 'endOtherSessions',
  tags: ['accounts'],
  summary: 'End every session of the account but this one',
  security: [{ session: [] }],
  response: { 200: Success(Type.Object({ sessionsEnded: Type.Integer() }), 'How many other sessions ended'), ...errors(401, 403, 429) },
}
