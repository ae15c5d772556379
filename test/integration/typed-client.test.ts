// The OpenAPI document as a team building a client takes it: types generated with openapi-typescript
// from the live /openapi.json, and test/typed-client/flow.ts, a flow through every operation written
// with openapi-fetch, compiled beside them under strict TypeScript (no cast anywhere), then run against
// a real server: every operation is called, and every status it answers is one the document declares.
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { copyFileSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { describe, test } from 'node:test'
import { fileURLToPath, pathToFileURL } from 'node:url'
import openapiTS, { astToString } from 'openapi-typescript'
import ts from 'typescript'
import { startDnsServer } from '../helpers/dns-server.js'
import { PASSWORD, startServer, tempDir, uniqueEmail } from '../helpers/server.js'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
const FLOW = path.join(ROOT, 'test/typed-client/flow.ts')
const METHODS = ['get', 'head', 'post', 'put', 'patch', 'delete']

interface Document { paths: Record<string, Record<string, { responses: Record<string, unknown> }>> }
interface FlowModule {
  flow: (baseUrl: string, email: string, password: string) => Promise<{ calls: string[]; codes: string[] }>
}

const TSCONFIG = {
  compilerOptions: {
    target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', lib: ['ES2023', 'DOM'], types: ['node'],
    strict: true, noUncheckedIndexedAccess: true, exactOptionalPropertyTypes: true, noImplicitReturns: true,
    skipLibCheck: true, outDir: 'out', rootDir: '.',
  },
  files: ['flow.ts', 'api.d.ts'],
}

describe('a typed client generated from the document', () => {
  test('the flow source has no cast, no non-null assertion, no any, and no escape from the checker but the one expected error', () => {
    const text = readFileSync(FLOW, 'utf8')
    const source = ts.createSourceFile(FLOW, text, ts.ScriptTarget.ES2022, true)
    const found: string[] = []
    const visit = (node: ts.Node) => {
      if (ts.isAsExpression(node) || ts.isTypeAssertionExpression(node) || ts.isNonNullExpression(node) || ts.isSatisfiesExpression(node) ||
        node.kind === ts.SyntaxKind.AnyKeyword) {
        found.push(`${source.getLineAndCharacterOfPosition(node.getStart()).line + 1}: ${node.getText()}`)
      }
      ts.forEachChild(node, visit)
    }
    visit(source)
    assert.deepEqual(found, [])
    assert.doesNotMatch(text, /@ts-ignore|@ts-nocheck/)
    assert.equal(text.match(/@ts-expect-error/g)?.length, 1, 'only the send without html or text is expected not to compile')
  })

  test('compiles strictly against the generated types, and runs through every operation with only declared answers', async (t) => {
    const dns = await startDnsServer(t)
    const server = await startServer(t, { env: { DNS_SERVERS: dns.server } })
    const res = await fetch(`${server.url}/openapi.json`)
    assert.equal(res.status, 200)
    const doc = await res.json() as Document

    const dir = tempDir(t, 'svc-typed-client-')
    writeFileSync(path.join(dir, 'api.d.ts'), astToString(await openapiTS(doc as never)))
    copyFileSync(FLOW, path.join(dir, 'flow.ts'))
    symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'), 'dir')
    writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ type: 'module' }))
    writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify(TSCONFIG))
    const tsc = spawnSync(process.execPath, [path.join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', dir], { encoding: 'utf8' })
    assert.equal(tsc.status, 0, `tsc:\n${tsc.stdout}${tsc.stderr}`)

    const { flow } = await import(pathToFileURL(path.join(dir, 'out/flow.js')).href) as FlowModule
    const report = await flow(server.url, uniqueEmail('typed'), PASSWORD)

    const called = new Map<string, string[]>()
    for (const call of report.calls) {
      const [method, schemaPath, status] = call.split(' ')
      const key = `${method!.toLowerCase()} ${schemaPath}`
      called.set(key, [...called.get(key) ?? [], status!])
    }
    const missing: string[] = []
    const undeclared: string[] = []
    for (const [p, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        if (!METHODS.includes(method)) continue
        const statuses = called.get(`${method} ${p}`)
        if (statuses === undefined) missing.push(`${method.toUpperCase()} ${p}`)
        for (const s of statuses ?? []) if (op.responses[s] === undefined && op.responses.default === undefined) undeclared.push(`${method.toUpperCase()} ${p} ${s}`)
      }
    }
    assert.deepEqual(missing, [], 'operations the flow does not go through')
    assert.deepEqual(undeclared, [], 'answers the document does not declare')
    // A cursor it never gave out, a send with neither html nor text, a scheduled email moved into the past
    // and moved after it was canceled, a domain added twice (on a plan with room for one), three unknown
    // received messages, a wrong current password, the account after logging out.
    assert.deepEqual(report.codes, ['validation_error', 'validation_error', 'invalid_schedule', 'email_not_scheduled', 'domain_exists', 'not_found', 'not_found', 'not_found', 'not_found', 'invalid_credentials', 'invalid_session'])
  })
})
