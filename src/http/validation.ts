import Ajv, { type ErrorObject } from 'ajv'
import addFormats from 'ajv-formats'
import type { FastifySchemaCompiler, FastifySchemaValidationError } from 'fastify'
import type { ErrorDetail } from '../errors.js'

// Bodies are JSON and keep their types: a number where a string belongs is an error, never coerced to
// "123". Query strings and path parameters are text by nature and are coerced to their declared types.
function makeAjv (coerceTypes: boolean) {
  const ajv = new Ajv.default({ allErrors: true, coerceTypes, useDefaults: true, removeAdditional: false, strict: false })
  addFormats.default(ajv)
  return ajv
}

const strict = makeAjv(false)
const coercing = makeAjv(true)

export const validatorCompiler: FastifySchemaCompiler<any> = ({ schema, httpPart }) =>
  (httpPart === 'body' ? strict : coercing).compile(schema as object) as any

function pointerToPath (pointer: string): string {
  return pointer.split('/').slice(1)
    .map((seg) => seg.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce((path, seg) => (/^\d+$/.test(seg) ? `${path}[${seg}]` : path ? `${path}.${seg}` : seg), '')
}

/** One entry per offending field, with its path (`body.events[1]`, `query.limit`) and a plain message. */
export function validationDetails (errors: FastifySchemaValidationError[], part: string): ErrorDetail[] {
  const details: ErrorDetail[] = []
  const seen = new Set<string>()
  for (const e of errors as Array<ErrorObject & FastifySchemaValidationError>) {
    let at = pointerToPath(e.instancePath ?? '')
    let message = e.message ?? 'is not valid'
    const params = (e.params ?? {}) as Record<string, unknown>
    if (e.keyword === 'required') {
      at = at ? `${at}.${String(params.missingProperty)}` : String(params.missingProperty)
      message = 'is required'
    } else if (e.keyword === 'additionalProperties') {
      at = at ? `${at}.${String(params.additionalProperty)}` : String(params.additionalProperty)
      message = 'is not a known field'
    } else if (e.keyword === 'anyOf' || e.keyword === 'oneOf') {
      message = 'does not match any allowed shape'
    }
    // A batch body is an array: its items are `body[3].subject`, not `body.[3].subject`.
    const path = at ? (at.startsWith('[') ? `${part}${at}` : `${part}.${at}`) : part
    // With allErrors, a union reports its branches too; one line per field is what a client can act on.
    if (seen.has(path)) continue
    seen.add(path)
    details.push({ path, message })
  }
  return details
}
