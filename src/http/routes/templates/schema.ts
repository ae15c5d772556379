import { Type } from 'typebox'
import { TEMPLATE_LIMITS, TEMPLATE_NAME_PATTERN } from '../../../domain/templates.js'
import { IdParams, Page, SESSION_OR_API_KEY, Success, Timestamp, component, errors } from '../../schemas.js'

const VARIABLE_NAME = `^[A-Za-z_][A-Za-z0-9_]{0,${TEMPLATE_LIMITS.variableName - 1}}$`
const Name = Type.String({
  minLength: 1, maxLength: TEMPLATE_LIMITS.nameLength, pattern: TEMPLATE_NAME_PATTERN,
  description: `unique in the account: letters, digits, '.', '_' and '-', starting with a letter or digit (like password-reset)`,
})
const Subject = Type.String({
  minLength: 1, maxLength: TEMPLATE_LIMITS.subjectLength,
  description: 'a Liquid template of the subject, no CR or LF; variables are printed as given, and a rendered subject with a control character is refused',
})
const Body = (what: string) => Type.String({ minLength: 1, maxLength: TEMPLATE_LIMITS.bodyLength, description: what })
const Html = Body(`a Liquid template of the html part: every {{ output }} is HTML-escaped ({{ x | raw }} prints as is); at most ${TEMPLATE_LIMITS.bodyLength} characters`)
const Text = Body(`a Liquid template of the text part, printed as given; at most ${TEMPLATE_LIMITS.bodyLength} characters`)

const VariableSchema = Type.Object({
  name: Type.String({ minLength: 1, maxLength: TEMPLATE_LIMITS.variableName, pattern: VARIABLE_NAME, description: 'a letter or _, then letters, digits or _' }),
  default: Type.Optional(Type.Unknown({ description: 'any JSON value; a variable with a default may be left out of a send' })),
}, { additionalProperties: false })
const Variables = Type.Array(VariableSchema, {
  maxItems: TEMPLATE_LIMITS.variables,
  description: `at most ${TEMPLATE_LIMITS.variables} declared variables; each used variable without a default must be given at every send`,
})
/** Variables given to a render (a send, a preview): name → any JSON value. */
export const GivenVariables = Type.Record(Type.String({ pattern: VARIABLE_NAME }), Type.Unknown(), {
  maxProperties: TEMPLATE_LIMITS.givenVariables,
  additionalProperties: false,
  description: `at most ${TEMPLATE_LIMITS.givenVariables} variables by name (a letter or _, then letters, digits or _), any JSON values; in html they are HTML-escaped, in subject and text printed as given`,
})

/** How a send names its template (in place of subject, html and text). */
export const TemplateSendSchema = Type.Object({
  id: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: 'the template\'s id (tpl_…); or name' })),
  name: Type.Optional(Type.String({ minLength: 1, maxLength: TEMPLATE_LIMITS.nameLength, description: 'the template\'s name; or id' })),
  version: Type.Optional(Type.Integer({ minimum: 1, maximum: 2_147_483_647, description: 'a version of it; default: the current one' })),
  variables: Type.Optional(GivenVariables),
}, {
  additionalProperties: false,
  description: 'a stored template in place of subject, html and text (which must then be left out: 422 template_invalid): ' +
    'named by id or by name; 422 template_not_found when there is no such template or version, 422 template_invalid when a variable it prints is missing',
})

const TemplateSchema = component('Template', Type.Object({
  id: Type.String({ description: 'tpl_…' }),
  name: Type.String(),
  version: Type.Integer({ description: 'this version: 1 at creation, one more at every change' }),
  subject: Type.String(),
  html: Type.Union([Type.String(), Type.Null()]),
  text: Type.Union([Type.String(), Type.Null()]),
  variables: Type.Array(Type.Object({ name: Type.String(), default: Type.Optional(Type.Unknown()) })),
  createdAt: Timestamp,
  updatedAt: Timestamp,
}, { description: 'A template at one of its versions' }))

const TemplateSummarySchema = component('TemplateSummary', Type.Object({
  id: Type.String(),
  name: Type.String(),
  version: Type.Integer({ description: 'the current version' }),
  subject: Type.String({ description: 'the current version\'s subject' }),
  createdAt: Timestamp,
  updatedAt: Timestamp,
}, { description: 'A template in the list: its current version, without html and text' }))

const TemplateVersionSchema = component('TemplateVersion', Type.Object({
  version: Type.Integer(),
  subject: Type.String(),
  createdAt: Timestamp,
}, { description: 'A version of a template, in the list of versions' }))

const PreviewResultSchema = component('TemplatePreview', Type.Object({
  version: Type.Integer({ description: 'the version rendered' }),
  subject: Type.String(),
  html: Type.Union([Type.String(), Type.Null()]),
  text: Type.Union([Type.String(), Type.Null()]),
}, { description: 'A template rendered with the variables given; nothing was sent' }))

export const CreateTemplateSchema = Type.Object({
  name: Name,
  subject: Subject,
  html: Type.Optional(Html),
  text: Type.Optional(Text),
  variables: Type.Optional(Variables),
}, { additionalProperties: false, description: 'html or text is required (or both)' })

export const UpdateTemplateSchema = Type.Object({
  name: Type.Optional(Name),
  subject: Type.Optional(Subject),
  html: Type.Optional(Type.Union([Html, Type.Null()], { description: 'the html template, or null to remove it (text must remain)' })),
  text: Type.Optional(Type.Union([Text, Type.Null()], { description: 'the text template, or null to remove it (html must remain)' })),
  variables: Type.Optional(Variables),
}, { additionalProperties: false, minProperties: 1, description: 'what changes; the rest is taken from the current version' })

export const PreviewTemplateSchema = Type.Object({
  variables: Type.Optional(GivenVariables),
  version: Type.Optional(Type.Integer({ minimum: 1, maximum: 2_147_483_647, description: 'the version to render; default: the current one' })),
}, { additionalProperties: false })

export const VersionParams = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 64 }),
  version: Type.Integer({ minimum: 1, maximum: 2_147_483_647 }),
})

export const VersionsQuery = Type.Object({
  limit: Type.Integer({ minimum: 1, maximum: 100, default: 20, description: 'versions per page, 1 to 100' }),
  cursor: Type.Optional(Type.String({ pattern: '^[1-9][0-9]{0,9}$', description: 'nextCursor of the previous page' })),
})

// The session cookie or a full_access API key.
const security = SESSION_OR_API_KEY
const tags = ['templates']
const INVALID = 'The template does not parse, is over a bound (size, tags, nesting), or declares a variable twice (template_invalid); `details` names each field'
const EXISTS = 'The account has a template of this name already (template_exists)'

export const CreateTemplateRoute = {
  operationId: 'createTemplate', tags, security, summary: 'Save a new template (its version 1)',
  body: CreateTemplateSchema,
  response: { 201: Success(TemplateSchema, 'The template, version 1'), ...errors({ 409: EXISTS, 422: INVALID }) },
}
export const ListTemplatesRoute = {
  operationId: 'listTemplates', tags, security, summary: 'List the templates, newest first (current versions, without html and text)',
  response: { 200: Success(Type.Array(TemplateSummarySchema), 'The templates, newest first') },
}
export const GetTemplateRoute = {
  operationId: 'getTemplate', tags, security, summary: 'A template at its current version', params: IdParams,
  response: { 200: Success(TemplateSchema, 'The template at its current version') },
}
export const UpdateTemplateRoute = {
  operationId: 'updateTemplate', tags, security, summary: 'Change a template: every change makes a new version; the old ones stay readable and sendable',
  params: IdParams, body: UpdateTemplateSchema,
  response: {
    200: Success(TemplateSchema, 'The template at its new version'),
    ...errors({ 409: `${EXISTS}, or other changes of it kept racing this one (operation_in_progress)`, 422: INVALID }),
  },
}
export const DeleteTemplateRoute = {
  operationId: 'deleteTemplate', tags, security, summary: 'Delete a template and all its versions (a send naming it is then 422 template_not_found)',
  params: IdParams,
  response: { 200: Success(Type.Object({ id: Type.String(), deleted: Type.Literal(true) }), 'The template and its versions are deleted') },
}
export const ListTemplateVersionsRoute = {
  operationId: 'listTemplateVersions', tags, security, summary: 'The versions of a template, newest first',
  params: IdParams, querystring: VersionsQuery,
  response: { 200: Page(TemplateVersionSchema, 'A page of versions, newest first') },
}
export const GetTemplateVersionRoute = {
  operationId: 'getTemplateVersion', tags, security, summary: 'A template at one of its versions',
  params: VersionParams,
  response: { 200: Success(TemplateSchema, 'The template at this version') },
}
export const PreviewTemplateRoute = {
  operationId: 'previewTemplate', tags, security, summary: 'Render a template with sample variables, sending nothing',
  params: IdParams, body: PreviewTemplateSchema,
  response: {
    200: Success(PreviewResultSchema, 'The rendered subject, html and text'),
    ...errors({
      422: 'A variable the template prints is missing (`details` names each, like body.variables.name), the subject would hold a control character, or the render passed a bound (template_invalid)',
      429: 'Too many requests, or this account used its template render time (rate_limited); Retry-After says when to come back',
    }),
  },
}
