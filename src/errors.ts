// Every error a client can see, in one table: the machine code of API.md, its HTTP status, and a default
// message. Handlers throw these; the error handler in src/http/errors.ts turns them into the envelope
// { success: false, error: { code, message, details? } }. Match on `code`, never on the class.

export interface ErrorDetail {
  path: string
  message: string
}

export class AppError extends Error {
  readonly code: string
  readonly statusCode: number
  readonly details: ErrorDetail[] | undefined
  /** Extra response headers (Retry-After, …). */
  readonly headers: Record<string, string> | undefined

  constructor (code: string, statusCode: number, message: string, details?: ErrorDetail[], headers?: Record<string, string>) {
    super(message)
    this.name = 'AppError'
    this.code = code
    this.statusCode = statusCode
    this.details = details
    this.headers = headers
  }
}

export interface ErrorKind {
  readonly code: string
  readonly statusCode: number
  readonly defaultMessage: string
  (message?: string, details?: ErrorDetail[], headers?: Record<string, string>): AppError
}

const table = new Map<string, ErrorKind>()

function defineError (code: string, statusCode: number, defaultMessage: string): ErrorKind {
  const make = (message?: string, details?: ErrorDetail[], headers?: Record<string, string>) =>
    new AppError(code, statusCode, message ?? defaultMessage, details, headers)
  const kind = Object.assign(make, { code, statusCode, defaultMessage }) as ErrorKind
  table.set(code, kind)
  return kind
}

export const ValidationError = defineError('validation_error', 400, 'The request is not valid')
export const AuthenticationRequired = defineError('authentication_required', 401, 'Authentication is required')
export const InvalidApiKey = defineError('invalid_api_key', 401, 'The API key is not valid')
export const InvalidSession = defineError('invalid_session', 401, 'The session is not valid; log in again')
export const InvalidCredentials = defineError('invalid_credentials', 401, 'Email or password is wrong')
export const PlanLimitReached = defineError('plan_limit_reached', 403, 'The plan limit is reached')
export const SignupClosed = defineError('signup_closed', 403, 'Signup is closed on this server; ask its operator for an account')
export const ForbiddenOrigin = defineError('forbidden_origin', 403, 'Requests from this origin are not allowed')
export const InsufficientPermission = defineError('insufficient_permission', 403, 'This API key does not have the permission this request needs')
export const NotFound = defineError('not_found', 404, 'No such resource')
export const MethodNotAllowed = defineError('method_not_allowed', 405, 'This route does not take this method')
export const RequestTimeout = defineError('request_timeout', 408, 'The request did not arrive in time')
export const EmailTaken = defineError('email_taken', 409, 'An account with this email already exists')
export const OperationInProgress = defineError('operation_in_progress', 409, 'The same operation is already running; wait for it to finish')
export const WebhookNotEnabled = defineError('webhook_not_enabled', 409, 'The webhook is not enabled; enable it first')
export const IdempotencyConflict = defineError('idempotency_conflict', 409, 'This Idempotency-Key was used with a different request')
export const PayloadTooLarge = defineError('payload_too_large', 413, 'The request body is too large')
export const UnsupportedMediaType = defineError('unsupported_media_type', 415, 'The request body must be application/json')
export const WebhookUrlNotAllowed = defineError('webhook_url_not_allowed', 422, 'The webhook URL is not allowed')
export const DomainExists = defineError('domain_exists', 409, 'This account already has this domain')
export const DomainNotVerified = defineError('domain_not_verified', 422, 'The from address is not on a verified domain of this account')
export const TemplateExists = defineError('template_exists', 409, 'This account already has a template of this name')
export const TemplateNotFound = defineError('template_not_found', 422, 'The template (or its version) named does not exist; nothing was sent')
export const TemplateInvalid = defineError('template_invalid', 422, 'The template cannot be saved or rendered as asked; nothing was sent')
export const RecipientSuppressed = defineError('recipient_suppressed', 422, 'Every recipient is on the suppression list')
export const AttachmentNotAllowed = defineError('attachment_not_allowed', 422, 'An attachment is a program or script, which mailbox providers refuse; nothing was sent')
export const InvalidSchedule = defineError('invalid_schedule', 422, 'scheduledAt is not a time this email can be scheduled for; nothing was sent')
export const EmailNotScheduled = defineError('email_not_scheduled', 409, 'The email is no longer scheduled: it went out, its time came, or it was canceled')
export const RateLimited = defineError('rate_limited', 429, 'Too many requests')
export const QuotaExceeded = defineError('quota_exceeded', 429, 'This send would pass the account\'s sending quota; nothing was sent')
export const HeadersTooLarge = defineError('headers_too_large', 431, 'The request headers are too large')
export const InternalError = defineError('internal_error', 500, 'Something went wrong on our side')
export const Unavailable = defineError('unavailable', 503, 'The service is temporarily unavailable; the request had no effect')

/** Every defined error kind, for documentation and the test that walks the table. */
export const errorKinds: ReadonlyMap<string, ErrorKind> = table

export function isAppError (err: unknown): err is AppError {
  return err instanceof AppError
}
