// The house's arrows (npm run deps; part of npm test): no import cycle under src/, config/ and workers/,
// and src/domain — the rules — imports only itself and the error table. See README "How it is built".
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-cycle',
      severity: 'error',
      comment: 'An import cycle: the modules on it cannot be understood (or tested) one without the other.',
      from: { path: '^(src|config|workers)/' },
      to: { circular: true },
    },
    {
      name: 'domain-imports-inward',
      severity: 'error',
      comment: 'src/domain holds the rules: it imports only itself and the error table (src/errors.ts).',
      from: { path: '^src/domain/' },
      to: { pathNot: ['^src/domain/', '^src/errors\\.ts$'], dependencyTypesNot: ['core'] },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    exclude: { path: '^(dist|node_modules)/' },
  },
}
