// `npm run lint` (and so `npm test`). typescript-eslint's recommended type-checked rules rather than
// neostandard: svc is async TypeScript throughout, and the findings worth a red build here are a promise
// nobody waits for, a promise handed where a callback is expected, an `any` leaking out of a parse;
// those need the type checker, which neostandard's TypeScript rules do not use. Layout is left to review.
// Cost: the type-checked run over the whole tree (tests too, where a missing await hides a failed
// assertion) took 21 s on this 2-core machine (28 s of CPU) with the other cores lightly used; checking
// only src/ with types saved little, since tsconfig.json's one program holds the tests anyway. `npm test`
// runs it beside the test files (scripts/run-tests.mjs --lint), in the CPU their two lanes leave idle.
import js from '@eslint/js'
import { defineConfig } from 'eslint/config'
import tseslint from 'typescript-eslint'

const unsafe = ['no-unsafe-argument', 'no-unsafe-assignment', 'no-unsafe-call', 'no-unsafe-member-access', 'no-unsafe-return']
const off = (names) => Object.fromEntries(names.map((n) => [`@typescript-eslint/${n}`, 'off']))
const readonly = (names) => Object.fromEntries(names.map((n) => [n, 'readonly']))

export default defineConfig(
  // test/typed-client compiles only beside the types its test generates, under its own strict tsc run.
  { ignores: ['dist/', 'node_modules/', 'test/typed-client/'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname }
    },
    rules: {
      // node:test's test() and describe() return promises the runner itself waits for.
      '@typescript-eslint/no-floating-promises': ['error', {
        allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['test', 'it', 'describe', 'suite'] }]
      }],
      // `_name` marks a parameter or a destructured field left out on purpose.
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', ignoreRestSiblings: true }],
      // Fastify plugins and hooks, and the start/stop of the parts, are async by contract with or without an await.
      '@typescript-eslint/require-await': 'off',
      // Control characters are matched on purpose: they are what header and log text is cleaned of.
      'no-control-regex': 'off',
      'no-empty': ['error', { allowEmptyCatch: true }],
      // A caught value handed on unchanged stays what it was; wrapping it would change what callers see.
      '@typescript-eslint/prefer-promise-reject-errors': ['error', { allowThrowingUnknown: true }]
    }
  },
  {
    // Rows from better-sqlite3 are untyped records; each store method's return type is the typed edge.
    files: ['src/store/sqlite/**'],
    rules: off(['no-explicit-any', ...unsafe])
  },
  {
    // validation.ts walks JSON Schema objects of any shape to word Ajv's errors.
    files: ['src/http/validation.ts'],
    rules: off(['no-explicit-any', ...unsafe])
  },
  {
    // Tests read JSON answers and parsed mail as `any` on purpose; their assertions check the shapes.
    files: ['test/**'],
    rules: off(['no-explicit-any', ...unsafe])
  },
  {
    // Plain JavaScript (the dashboard, the scripts, configs) has no types to check; the core rules apply.
    files: ['**/*.js', '**/*.mjs', '**/*.cjs'],
    ...tseslint.configs.disableTypeChecked
  },
  {
    files: ['scripts/**', '*.js', '*.cjs'],
    languageOptions: { globals: readonly(['process', 'console', 'fetch', 'AbortSignal', 'URL', 'setTimeout', 'clearTimeout', 'module', 'require']) }
  },
  {
    files: ['web/js/**'],
    languageOptions: {
      globals: readonly(['window', 'document', 'location', 'history', 'navigator', 'fetch', 'URL', 'URLSearchParams',
        'setTimeout', 'clearTimeout', 'HTMLElement', 'Node'])
    }
  }
)
