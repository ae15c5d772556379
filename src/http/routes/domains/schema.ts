import { Type } from 'typebox'
import { IdParams, Success, Timestamp, component, errors, SESSION_OR_API_KEY } from '../../schemas.js'

const RecordStatus = Type.Union([Type.Literal('pending'), Type.Literal('verified'), Type.Literal('failed')])

export const DnsRecordSchema = component('DnsRecord', Type.Object({
  type: Type.Union([Type.Literal('TXT'), Type.Literal('MX'), Type.Literal('CNAME')]),
  name: Type.String(),
  value: Type.String(),
  priority: Type.Optional(Type.Integer({ description: 'MX only' })),
  purpose: Type.Union([Type.Literal('dkim'), Type.Literal('spf'), Type.Literal('return_path'), Type.Literal('dmarc'), Type.Literal('receiving')], {
    description: 'receiving: the domain\'s own MX to the inbound listener, shown while receiving is on',
  }),
  required: Type.Boolean({ description: 'false for the suggested DMARC record: the status does not depend on it' }),
  status: RecordStatus,
}, { description: 'A DNS record to publish for a sender domain, and whether it was found' }))

export const DomainSchema = component('Domain', Type.Object({
  id: Type.String(),
  name: Type.String({ description: 'lower-case ASCII; an internationalised name in punycode' }),
  status: Type.Union([Type.Literal('pending'), Type.Literal('verified'), Type.Literal('failed')], {
    description: 'pending: never verified; verified: every required record found; failed: verified once, a required record is gone since',
  }),
  records: Type.Array(DnsRecordSchema),
  createdAt: Timestamp,
  lastCheckedAt: Type.Union([Timestamp, Type.Null()]),
  verifiedAt: Type.Union([Timestamp, Type.Null()]),
  receiving: Type.Boolean({ description: 'whether mail to any address at this domain is taken (once verified) and sent on as email.received' }),
  tracking: Type.Object({ opens: Type.Boolean(), clicks: Type.Boolean() }, {
    description: 'what a send from this domain gets when it does not choose: an open pixel, tracked links (never set: the account\'s default, on)',
  }),
}, { description: 'A sender domain and its DNS records' }))

export const UpdateDomainSchema = Type.Object({
  receiving: Type.Optional(Type.Boolean({ description: 'true: take mail for any address at this domain (email.received); false: refuse it again' })),
  tracking: Type.Optional(Type.Object({
    opens: Type.Optional(Type.Boolean()),
    clicks: Type.Optional(Type.Boolean()),
  }, {
    additionalProperties: false, minProperties: 1,
    description: 'defaults for sends from this domain that leave a choice out; what is left out here stays. Sends already accepted keep theirs',
  })),
}, { additionalProperties: false, minProperties: 1, description: 'receiving, tracking, or both' })

export const CreateDomainSchema = Type.Object({
  name: Type.String({ minLength: 1, maxLength: 1024, description: 'the domain to send from, like example.com' }),
}, { additionalProperties: false })

// The session cookie or a full_access API key.
const security = SESSION_OR_API_KEY
const tags = ['domains']

export const CreateDomainRoute = {
  operationId: 'createDomain', tags, security, summary: 'Add a sender domain: svc makes its DKIM key and answers with the DNS records to publish',
  body: CreateDomainSchema,
  response: { 201: Success(DomainSchema, 'The domain, added: publish its records, then verify'), ...errors(400, 401, 403, 409, 413, 415) },
}
export const ListDomainsRoute = {
  operationId: 'listDomains', tags, security, summary: 'List the sender domains, newest first',
  response: { 200: Success(Type.Array(DomainSchema), 'The sender domains, newest first'), ...errors(401, 403) },
}
export const GetDomainRoute = {
  operationId: 'getDomain', tags, security, summary: 'One sender domain and its records', params: IdParams,
  response: { 200: Success(DomainSchema, 'The domain'), ...errors(401, 403, 404) },
}
export const VerifyDomainRoute = {
  operationId: 'verifyDomain', tags, security, summary: 'Check the DNS records now', params: IdParams,
  response: { 200: Success(DomainSchema, 'The domain, its records just checked'), ...errors(401, 403, 404) },
}
export const UpdateDomainRoute = {
  operationId: 'updateDomain', tags, security, summary: 'Turn receiving mail on or off for a sender domain, or set its tracking defaults', params: IdParams,
  body: UpdateDomainSchema,
  response: { 200: Success(DomainSchema, 'The domain, with receiving and tracking as asked'), ...errors(400, 401, 403, 404, 413, 415) },
}
export const DeleteDomainRoute = {
  operationId: 'deleteDomain', tags, security, summary: 'Delete a sender domain (and its DKIM key)', params: IdParams,
  response: { 200: Success(Type.Object({ id: Type.String(), deleted: Type.Literal(true) }), 'The domain is deleted'), ...errors(401, 403, 404) },
}
