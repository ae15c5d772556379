// The house's arrows (npm run deps; part of npm test): no import cycle under src/, config/ and workers/;
// src/domain — the rules — imports only itself and the error table; the store keeps records and knows
// nothing of the engine, the mailer or the use cases; the mailer reaches the use cases only through what
// the composition root hands it; and no HTTP route seals, opens or reads the secret. See README "How it
// is built".
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
    {
      name: 'store-imports-no-callers',
      severity: 'error',
      comment: 'src/store keeps what it is given: it may use the rules (src/domain) but never the delivery engine, the mailer or the use cases that call it.',
      from: { path: '^src/store/' },
      to: { path: '^src/(delivery|mail|app)/' },
    },
    {
      name: 'mail-imports-no-use-cases',
      severity: 'error',
      comment: 'src/mail sends and receives mail: the rules it applies live in src/domain, and the use cases it calls are handed to it as interfaces it declares (src/mail/hand-off.ts, inbound/receiving.ts), never imported.',
      from: { path: '^src/mail/' },
      to: { path: '^src/app/' },
    },
    {
      name: 'routes-hold-no-secret',
      severity: 'error',
      comment: 'An HTTP route never seals, opens or reads SVC_SECRET (nor is given it: RouteContext has no config.secret); it asks a use case, as the tracking links ask the email service.',
      from: { path: '^src/http/routes/' },
      to: { path: ['^src/domain/secrets\\.ts$', '^src/domain/secret-check\\.ts$', '^src/mail/tracking\\.ts$', '^config/secret\\.ts$'] },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    exclude: { path: '^(dist|node_modules)/' },
  },
}
