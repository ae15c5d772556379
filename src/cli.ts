// Operator commands. They act on the same store as the server (DATA_DIR or MONGODB_URI, read from the
// environment exactly as the server reads it), so they can run beside a live server.
import { existsSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { ConfigError, loadConfig, type Config } from '../config/index.js'
import { resolveSecret } from '../config/secret.js'
import { createAccountService, normaliseEmail } from './app/accounts.js'
import { createUsageService } from './app/account-usage.js'
import { requireStoreSecret } from './app/secret-check.js'
import { systemClock } from './domain/clock.js'
import { PLAN_NAMES, PLANS, isPlan, limitsOf } from './domain/plans.js'
import { randomToken } from './domain/secrets.js'
import { isAppError } from './errors.js'
import { openStore } from './store/open.js'
import { BackupError, backupSqlite, restoreSqlite } from './store/sqlite/backup.js'
import type { Store } from './store/types.js'
import { describeStore, secretSourceOf } from './store/where.js'

export { describeStore }

const USAGE = `usage: npm run cli -- <command>

commands:
  account create <email> [--password-stdin] [--plan free|pro]
                                  create an account; with --password-stdin its password is read from
                                  standard input (first line), else one is generated and printed
  account show <email>            the account's plan, limits and usage
  plan set <email> <free|pro>     change an account's plan
  plan list                       the plans and their limits
  migrate                         create or upgrade the store's schema and indexes, then exit
  backup <file>                   SQLite: a consistent copy of the store into a new file, while svc runs
  restore <file> [--force]        SQLite: a backup into an empty DATA_DIR (checked, and migrated if older);
                                  one written under another secret than SVC_SECRET (or DATA_DIR/secret,
                                  put in place first) is refused, unless --force: then its API keys,
                                  sessions, webhook signing secrets and DKIM keys do not work
  help                            this text`

class UsageError extends Error {}
class CommandError extends Error {}

interface Output {
  out(line: string): void
  /** Standard input, whole (the --password-stdin commands). */
  readStdin?(): Promise<string>
}

/** Standard input to its end, at most 64 KiB (a password is a line). */
export async function readStdin (stream: NodeJS.ReadableStream = process.stdin): Promise<string> {
  let text = ''
  for await (const chunk of stream) {
    text += String(chunk)
    if (text.length > 65_536) throw new UsageError('standard input is too long for a password')
  }
  return text
}

function flag (args: string[], name: string): boolean {
  const i = args.indexOf(name)
  if (i === -1) return false
  args.splice(i, 1)
  return true
}

function option (args: string[], name: string): string | undefined {
  const i = args.indexOf(name)
  if (i === -1) return undefined
  const value = args[i + 1]
  if (value === undefined || value.startsWith('--')) throw new UsageError(`${name} needs a value`)
  args.splice(i, 2)
  return value
}

async function findAccount (store: Store, email: string, where: string) {
  const account = await store.findAccountByEmail(normaliseEmail(email))
  if (!account) {
    throw new CommandError(`no account with email ${normaliseEmail(email)} in ${where}; the CLI must see the server's DATA_DIR or MONGODB_URI`)
  }
  return account
}

const SECRET_NOTE = 'API keys, sessions, tracking links and whatever svc seals at rest depend on SVC_SECRET: the restored store works only under the same SVC_SECRET'

function backup (config: Config, file: string, io: Output): void {
  const made = backupSqlite(config.dataDir, file)
  io.out(`backed up ${describeStore(config)} to ${made.file} (${made.bytes} bytes, schema version ${made.schemaVersion}); integrity check ok`)
  if (config.secret === undefined) {
    io.out(`note: SVC_SECRET is not set, so this store's secret is ${path.resolve(config.dataDir, 'secret')}, which the backup does not hold: ` +
      'keep a copy of it with the backup, and put it in the new DATA_DIR before restoring (restore checks the backup against it)')
  }
}

/**
 * The secret a server started now on this configuration would use, without making one: SVC_SECRET, or
 * DATA_DIR/secret when it is there (resolveSecret would generate it, and restore needs DATA_DIR empty).
 */
function existingSecret (config: Config): string | undefined {
  if (config.secret !== undefined) return config.secret
  try {
    const text = readFileSync(path.join(config.dataDir, 'secret'), 'utf8').trim()
    return text.length > 0 ? text : undefined
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw err
  }
}

function restore (config: Config, file: string, force: boolean, io: Output): void {
  const secret = existingSecret(config)
  const done = restoreSqlite(file, config.dataDir, { secret, source: secretSourceOf(config), force })
  const migrated = done.fromVersion === done.toVersion ? `schema version ${done.toVersion}` : `schema version ${done.fromVersion}, migrated to ${done.toVersion}`
  const c = done.counts
  io.out(`restored ${path.resolve(file)} into ${describeStore(config)} (${migrated}); integrity check ok`)
  io.out(`${c.accounts} accounts, ${c.apiKeys} active API keys, ${c.webhooks} webhooks, ${c.emails} emails`)
  const from = config.secret !== undefined ? 'SVC_SECRET' : 'DATA_DIR/secret'
  switch (done.secret) {
    case 'matched':
      io.out(`the backup was written under this svc's secret (${from}): start svc with it`)
      return
    case 'unchecked':
      // A backup from before svc kept a check value: the first start takes whatever secret it is given.
      io.out(`note: the backup holds no check value of its secret (an earlier svc made it), so it was not checked: ${SECRET_NOTE}` +
        `${secret === undefined ? ` (unset here: copy the old DATA_DIR/secret into ${done.dataDir} before starting svc)` : ''}`)
      return
    case 'other':
      io.out(`warning: restored with --force under another secret than the backup's (${from}): its ${c.apiKeys} active API keys, its sessions, ` +
        `${c.webhooks} webhooks' signing secrets and ${c.domains} domains' DKIM keys do not work (accounts log in with their passwords: ` +
        'make new keys, and delete and add again the webhooks and domains)')
      return
    case 'unknown':
      io.out('warning: restored with --force without a secret to check the backup against: svc takes the secret it starts with from now on; ' +
        'unless that is the backup\'s, its API keys, sessions, webhook signing secrets and DKIM keys do not work')
  }
}

export async function runCli (argv: string[], env: Record<string, string | undefined>, io: Output): Promise<void> {
  const args = [...argv]
  const [group, action] = args
  if (group === undefined || group === 'help' || group === '--help' || group === '-h') {
    io.out(USAGE)
    return
  }
  if (group === 'plan' && action === 'list') {
    for (const plan of PLAN_NAMES) io.out(`${plan}\t${PLANS[plan].apiKeys} API keys\t${PLANS[plan].webhooks} webhooks`)
    return
  }
  const known = ['account create', 'account show', 'plan set', 'migrate', 'backup', 'restore']
  const single = group === 'migrate' || group === 'backup' || group === 'restore'
  const command = single ? group : `${group} ${action ?? ''}`.trim()
  if (!known.includes(command)) throw new UsageError(`unknown command: ${command}`)

  const config = loadConfig(env)
  const where = describeStore(config)
  if (command === 'backup' || command === 'restore') {
    // Neither opens the store as the server does: backup must not migrate a live store under a server
    // of another version, and restore must find DATA_DIR empty (no secret generated into it first).
    const rest = args.slice(1)
    const force = command === 'restore' && flag(rest, '--force')
    const [file, ...extra] = rest
    if (!file || extra.length > 0) throw new UsageError(`${command} takes one file${command === 'restore' ? ' (and --force)' : ''}`)
    if (config.mongodbUri !== undefined) {
      throw new CommandError(`${command} is for the SQLite store; ${where} is backed up with mongodump and mongorestore, or snapshots (README "Backup and restore")`)
    }
    try {
      if (command === 'backup') backup(config, file, io)
      else restore(config, file, force, io)
    } catch (err) {
      if (err instanceof BackupError) throw new CommandError(err.message)
      throw err
    }
    return
  }
  // Commands that read accounts never create an empty store (and a secret) where there was none: that
  // is a CLI run in another directory than the server, or without its DATA_DIR.
  if (config.mongodbUri === undefined && command !== 'account create' && command !== 'migrate' &&
      !existsSync(path.join(config.dataDir, 'svc.db'))) {
    throw new CommandError(`no svc store in ${path.resolve(config.dataDir)} (DATA_DIR): run the CLI with the server's DATA_DIR, or from the directory the server runs in`)
  }
  const secret = resolveSecret(config)
  const store = await openStore(config, { shortLived: true })
  try {
    // As the server does: a store written under another secret is refused before anything is written.
    await requireStoreSecret(store, secret, where, secretSourceOf(config))
    switch (command) {
      case 'migrate':
        io.out(`the ${store.kind} store is up to date`)
        return
      case 'account create': {
        const rest = args.slice(2)
        if (rest.includes('--password')) {
          throw new UsageError('--password is not taken: a password on the command line shows in ps and in shell history; pipe it in with --password-stdin')
        }
        const fromStdin = flag(rest, '--password-stdin')
        // The first line of standard input, without its line ending.
        const given = fromStdin ? (await (io.readStdin ?? readStdin)()).split(/\r?\n/)[0] ?? '' : undefined
        const plan = option(rest, '--plan') ?? 'free'
        const [email, ...extra] = rest
        if (!email || extra.length > 0) throw new UsageError('account create takes one email')
        if (!/^[^@\s]+@[^@\s]+$/.test(email)) throw new UsageError(`not an email address: ${email}`)
        if (!isPlan(plan)) throw new UsageError(`unknown plan "${plan}" (plans: ${PLAN_NAMES.join(', ')})`)
        const password = given ?? randomToken(18)
        if (password.length < 10 || password.length > 200) throw new UsageError('the password must be 10 to 200 characters')
        const accounts = createAccountService({ store, secret, clock: systemClock, sessionTtlMs: config.sessionTtlMs })
        try {
          const account = await accounts.register(email, password, plan)
          io.out(`created account ${account.id} ${account.email} on the ${PLANS[plan].name} plan`)
          if (given === undefined) io.out(`password: ${password}`)
        } catch (err) {
          if (isAppError(err) && err.code === 'email_taken') throw new CommandError(`an account with email ${normaliseEmail(email)} already exists`)
          throw err
        }
        return
      }
      case 'account show': {
        const email = args[2]
        if (!email) throw new UsageError('account show takes an email')
        const account = await findAccount(store, email, where)
        const limits = limitsOf(account.plan)
        const usage = await createUsageService({ store }).of(account.id)
        io.out(`${account.id} ${account.email} plan=${account.plan} apiKeys=${usage.apiKeys}/${limits.apiKeys} webhooks=${usage.webhooks}/${limits.webhooks}`)
        return
      }
      case 'plan set': {
        const [, , email, plan, ...extra] = args
        if (!email || !plan || extra.length > 0) throw new UsageError('plan set takes an email and a plan')
        if (!isPlan(plan)) throw new UsageError(`unknown plan "${plan}" (plans: ${PLAN_NAMES.join(', ')})`)
        const account = await findAccount(store, email, where)
        await store.setAccountPlan(account.id, plan)
        const limits = limitsOf(plan)
        io.out(`${account.email} is now on the ${PLANS[plan].name} plan (${limits.apiKeys} API keys, ${limits.webhooks} webhooks)`)
        // Existing keys and webhooks above a lower plan's limits stay; only new ones are refused.
        return
      }
    }
  } finally {
    await store.close()
  }
}

const isMain = process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href
if (isMain) {
  runCli(process.argv.slice(2), process.env, { out: (line) => process.stdout.write(line + '\n') }).catch((err: unknown) => {
    if (err instanceof UsageError) {
      process.stderr.write(`svc: ${err.message}\n\n${USAGE}\n`)
      process.exit(2)
    }
    if (err instanceof ConfigError) {
      for (const p of err.problems) process.stderr.write(`svc: configuration: ${p}\n`)
      process.exit(2)
    }
    process.stderr.write(`svc: ${err instanceof Error ? err.message : String(err)}\n`)
    process.exit(1)
  })
}
