// Fastify turns each route's response schemas into serializers (fast-json-stringify) whenever an app is
// built. A process builds one app, but a test file builds dozens, one per server, and compiling the same
// schemas again was most of the second each took to be ready (about 55 % of its CPU, profiled). The
// serializers are compiled once per process here, keyed by the schema's text and the shared schemas' text,
// and handed to every app that asks for the same; a serializer keeps no state between calls.
import fastJsonStringify from 'fast-json-stringify'

type Serialize = (data: unknown) => string
type SchemaLike = { $id?: string } & Record<string, unknown>

const compiled = new Map<string, Map<string, Serialize>>()

/** Fastify's schemaController.compilersFactory.buildSerializer, as its default one, with a cache. */
export function buildCachedSerializer (shared?: unknown, options?: unknown) {
  const externalSchemas = shared as Record<string, SchemaLike> | undefined
  const serializerOpts = (options ?? {}) as Record<string, unknown>
  const sharedKey = JSON.stringify([externalSchemas ?? null, serializerOpts])
  let forShared = compiled.get(sharedKey)
  if (forShared === undefined) {
    forShared = new Map()
    compiled.set(sharedKey, forShared)
  }
  const cache = forShared
  return ({ schema: given }: { schema?: unknown }): Serialize => {
    const schema = given as SchemaLike
    const key = JSON.stringify(schema)
    let serialize = cache.get(key)
    if (serialize === undefined) {
      // As Fastify's own: a schema that is one of the shared ones is not given to itself as external.
      let external = externalSchemas
      if (external !== undefined && schema.$id !== undefined && external[schema.$id] !== undefined) {
        external = { ...external }
        delete external[schema.$id]
      }
      serialize = fastJsonStringify(schema as never, { ...serializerOpts, schema: external as never }) as Serialize
      cache.set(key, serialize)
    }
    return serialize
  }
}
