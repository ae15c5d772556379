// One connection to the relay, and the SMTP dialogue on it (RFC 5321), written for volume. When the relay
// offers PIPELINING (RFC 2920) MAIL FROM, every RCPT TO and DATA go out in one write, and the next
// transaction's commands ride with the message before it: one write and one round trip per message. nodemailer's client (the
// one svc used before) takes a round trip per command and passes each message through a chain of streams;
// over loopback that was most of the SMTP thread's CPU per email (benchmarks/HISTORY.md, mail over SMTP, round 5).
// Without PIPELINING the commands go one by one. The dialogue is the same in both (./smtp-dialogue.ts): only
// how its commands are written differs. TLS (smtps, or STARTTLS when offered, required with requireTLS)
// verifies the relay's certificate (./smtp-connect.ts); AUTH PLAIN or LOGIN when the URL has credentials.
import type net from 'node:net'
import tls from 'node:tls'
import { connect, defaultName, serverName, SmtpConnectionError, SmtpSetupError, type SmtpEndpoint } from './smtp-connect.js'
import {
  bytesOf, conclude, goesOn, positive, tooLargeReplies, transactionCommands,
  type Envelope, type MessageBytes, type TransactionReplies,
} from './smtp-dialogue.js'
import { dataBlock, dataChunks, ReplyReader, replyLines, SmtpProtocolError, type SmtpReply } from './smtp-reply.js'

export { SmtpConnectionError, SmtpSetupError, type SmtpEndpoint } from './smtp-connect.js'
export { bytesOf, type Envelope, type MessageBytes, type TransactionReplies } from './smtp-dialogue.js'

interface Waiter { resolve: (r: SmtpReply) => void }

interface Job {
  envelope: Envelope
  raw: MessageBytes
  /** Its size in bytes, declared in MAIL FROM when the relay takes SIZE. */
  size: number
  resolve: (r: TransactionReplies) => void
  reject: (err: unknown) => void
  /** The end of its message was written: the relay may have taken it. */
  bodySent: boolean
  /** The answers to its MAIL, RCPTs and DATA, once those have started (./smtp-dialogue.ts conclude reads them). */
  answers?: Promise<SmtpReply[]>
}

export class SmtpConnection {
  private socket: net.Socket
  private reader = new ReplyReader()
  private waiters: Waiter[] = []
  // Each expect() registers one rejector for its n waiters: on failure every pending expect rejects once.
  private rejectors: Array<{ count: number; reject: (err: Error) => void }> = []
  private failure: SmtpConnectionError | undefined
  private lastRefusal: SmtpReply | undefined
  /** Transactions given and not yet answered, oldest first. */
  private jobs: Job[] = []
  /**
   * The next transaction's commands may be written: pipelined, once the one before has sent its message
   * (or needs none); one by one, once it is answered.
   */
  private commandsMayGo = true
  private pipelining = false
  private smtputf8 = false
  /** The relay offers SIZE (RFC 1870): MAIL FROM declares each message's size. */
  private sizeOffered = false
  /** The largest message the relay takes, from its SIZE; 0: it names no limit. */
  private sizeLimit = 0
  private closedListeners: Array<() => void> = []
  /** Messages whose end was written and whose reply has not come: while there are any, silence may last dataEndTimeoutMs. */
  private endsOwed = 0
  /** Transactions completed on this connection. */
  sent = 0

  private constructor (socket: net.Socket, private readonly ep: SmtpEndpoint) {
    this.socket = socket
    this.attach(socket)
  }

  /** Connects, reads the greeting, says EHLO, starts TLS and logs in as the endpoint says. */
  static async open (ep: SmtpEndpoint): Promise<SmtpConnection> {
    const socket = await connect(ep)
    const conn = new SmtpConnection(socket, ep)
    const timer = setTimeout(() => conn.fail(new SmtpConnectionError('ETIMEDOUT', `no greeting from the relay within ${ep.connectionTimeoutMs} ms`)), ep.connectionTimeoutMs)
    try {
      await conn.handshake()
      return conn
    } catch (err) {
      conn.destroy()
      throw err
    } finally {
      clearTimeout(timer)
    }
  }

  /**
   * Transactions it takes at once: two when the relay pipelines (the next one's commands go out with the
   * message before it), else one.
   */
  get depth (): number {
    return this.pipelining ? 2 : 1
  }

  onClose (listener: () => void): void {
    if (this.failure !== undefined) listener()
    else this.closedListeners.push(listener)
  }

  /**
   * One transaction (up to `depth` at once, answered in order). Resolves with the relay's replies
   * (refusals included); rejects with SmtpConnectionError when the connection fails before the last
   * reply, with `bodySent` telling whether the message's end reached the relay (it may have been taken).
   */
  send (envelope: Envelope, raw: MessageBytes): Promise<TransactionReplies> {
    if (this.failure !== undefined) return Promise.reject(this.failure)
    if (this.jobs.length >= this.depth) return Promise.reject(new Error(`at most ${this.depth} transactions at once on a connection`))
    const size = bytesOf(raw)
    // Larger than the relay said it takes: it would refuse it after the whole message went over the wire.
    if (this.sizeLimit > 0 && size > this.sizeLimit) return Promise.resolve(tooLargeReplies(size, this.sizeLimit))
    return new Promise<TransactionReplies>((resolve, reject) => {
      this.jobs.push({ envelope, raw, size, resolve, reject, bodySent: false })
      this.next()
    })
  }

  /** Says QUIT and closes; what is in flight fails. */
  quit (): void {
    if (this.failure !== undefined) return
    if (this.jobs.length === 0) this.socket.write('QUIT\r\n')
    this.socket.end()
    this.fail(new SmtpConnectionError('ECLOSED', 'the connection was closed'))
  }

  destroy (): void {
    this.fail(new SmtpConnectionError('ECLOSED', 'the connection was closed'))
  }

  /**
   * The oldest transaction whose commands have not gone out starts them, when the one before allows it
   * (`commandsMayGo`): the relay's answers to them are then read by `transact`.
   */
  private next (): void {
    if (!this.commandsMayGo || this.failure !== undefined) return
    const job = this.jobs.find((j) => j.answers === undefined)
    if (job === undefined) return
    this.commandsMayGo = false
    this.begin(job)
  }

  /**
   * Writes a transaction's commands: pipelined, all at once, after `carrying` in the same write (the message
   * before it); otherwise one at a time, each after the answer to the one before, as far as they are worth it.
   */
  private begin (job: Job, carrying: Buffer[] = []): void {
    const commands = transactionCommands(job.envelope, { size: this.sizeOffered ? job.size : undefined, smtputf8: this.smtputf8 })
    if (this.pipelining) {
      job.answers = this.expect(commands.length)
      this.writeAll([...carrying, Buffer.from(commands.join(''), 'utf8')])
    } else {
      job.answers = this.oneByOne(commands, job.envelope.to.length)
    }
    void this.transact(job)
  }

  private async oneByOne (commands: string[], recipients: number): Promise<SmtpReply[]> {
    const answers: SmtpReply[] = []
    for (const line of commands) {
      if (!goesOn(answers, recipients)) break
      answers.push(await this.command(line))
    }
    return answers
  }

  /** A transaction's answers, and what they call for: its message, an empty one, RSET, or nothing. */
  private async transact (job: Job): Promise<void> {
    let replies: TransactionReplies
    try {
      const answered = conclude(await job.answers!, job.envelope.to.length)
      replies = answered.replies
      if (answered.next === 'reset') {
        // Nothing to send: a transaction the relay opened is reset before the next one's commands.
        const reset = this.expect(1)
        this.write('RSET\r\n')
        this.written()
        // The relay's word on this message is known; a connection lost now fails only what follows.
        await reset.catch(() => {})
      } else if (answered.next === 'done') {
        this.written()
      } else if (answered.next === 'empty') {
        const final = this.awaitEnd()
        this.write('.\r\n')
        this.written()
        replies.final = await final
      } else {
        // The message, and with it the next transaction's commands when one waits (pipelined): one write,
        // and the relay's answers to both come back together.
        const final = this.awaitEnd()
        job.bodySent = true
        const following = this.pipelining ? this.jobs.find((j) => j.answers === undefined && j !== job) : undefined
        if (following !== undefined) {
          this.begin(following, this.dataOf(job.raw))
        } else {
          this.writeAll(this.dataOf(job.raw))
          this.written()
        }
        replies.final = await final
      }
    } catch (err) {
      this.settle(job, err)
      return
    }
    this.settle(job, undefined, replies)
  }

  /**
   * A transaction's last command or message is written: pipelined, the next one's commands may go now;
   * one by one, only once it is answered (settle).
   */
  private written (): void {
    if (!this.pipelining) return
    this.commandsMayGo = true
    this.next()
  }

  private settle (job: Job, err: unknown, replies?: TransactionReplies): void {
    const at = this.jobs.indexOf(job)
    if (at >= 0) this.jobs.splice(at, 1)
    if (replies !== undefined) {
      this.sent += 1
      job.resolve(replies)
    } else {
      if (err instanceof SmtpConnectionError) {
        // Each transaction its own error: the connection's is shared by all that fail with it.
        const own = new SmtpConnectionError(err.code, err.message, err.reply)
        own.bodySent = job.bodySent
        job.reject(own)
      } else {
        job.reject(err)
      }
    }
    if (!this.pipelining) {
      this.commandsMayGo = true
      this.next()
    }
  }

  private async handshake (): Promise<void> {
    const greeting = (await this.expect(1))[0]!
    if (greeting.code !== 220) throw new SmtpSetupError(greeting, 'greeting')
    const name = this.ep.name ?? defaultName(this.socket)
    let caps = await this.hello(name)
    const tlsOn = this.socket instanceof tls.TLSSocket
    if (!tlsOn && caps !== undefined && caps.has('STARTTLS')) {
      const answer = await this.command('STARTTLS\r\n')
      if (answer.code !== 220) {
        if (this.ep.requireTLS) throw new SmtpSetupError(answer, 'STARTTLS')
      } else {
        await this.upgrade()
        caps = await this.hello(name)
      }
    } else if (!tlsOn && this.ep.requireTLS) {
      throw new SmtpConnectionError('ETLS', 'the relay does not offer STARTTLS, and TLS is required')
    }
    this.pipelining = caps?.has('PIPELINING') ?? false
    this.smtputf8 = caps?.has('SMTPUTF8') ?? false
    this.sizeOffered = caps?.has('SIZE') ?? false
    const limit = caps?.get('SIZE') ?? ''
    this.sizeLimit = /^[0-9]{1,15}$/.test(limit) ? Number(limit) : 0
    if (this.ep.user !== undefined) await this.login(caps?.get('AUTH') ?? '')
  }

  /** EHLO, or HELO from a relay that refuses it. The capabilities, by keyword (undefined after HELO). */
  private async hello (name: string): Promise<Map<string, string> | undefined> {
    const ehlo = await this.command(`EHLO ${name}\r\n`)
    if (positive(ehlo)) {
      const caps = new Map<string, string>()
      for (const line of replyLines(ehlo).slice(1)) {
        const sp = line.indexOf(' ')
        const key = (sp < 0 ? line : line.slice(0, sp)).toUpperCase()
        caps.set(key, sp < 0 ? '' : line.slice(sp + 1).toUpperCase())
      }
      return caps
    }
    const helo = await this.command(`HELO ${name}\r\n`)
    if (!positive(helo)) throw new SmtpSetupError(helo, 'HELO')
    return undefined
  }

  private async login (methods: string): Promise<void> {
    const offered = new Set(methods.split(' '))
    const user = this.ep.user!
    const pass = this.ep.pass ?? ''
    let answer: SmtpReply
    if (offered.has('PLAIN')) {
      answer = await this.command(`AUTH PLAIN ${Buffer.from(`\0${user}\0${pass}`, 'utf8').toString('base64')}\r\n`)
    } else if (offered.has('LOGIN')) {
      answer = await this.command('AUTH LOGIN\r\n')
      if (answer.code === 334) answer = await this.command(`${Buffer.from(user, 'utf8').toString('base64')}\r\n`)
      if (answer.code === 334) answer = await this.command(`${Buffer.from(pass, 'utf8').toString('base64')}\r\n`)
    } else {
      throw new SmtpConnectionError('EAUTH', 'the relay offers no AUTH method svc can use (PLAIN, LOGIN)')
    }
    if (answer.code !== 235) throw new SmtpSetupError(answer, 'AUTH')
  }

  private async upgrade (): Promise<void> {
    const plain = this.socket
    this.detach(plain)
    const secured = tls.connect({ servername: serverName(this.ep.host), ...this.ep.tls, socket: plain })
    this.socket = secured
    this.attach(secured)
    this.reader = new ReplyReader()
    await new Promise<void>((resolve, reject) => {
      const done = (err?: SmtpConnectionError) => {
        secured.off('secureConnect', ok)
        secured.off('error', failed)
        secured.off('close', closed)
        if (err === undefined) resolve()
        else reject(err)
      }
      const ok = () => done()
      const failed = (err: Error) => done(new SmtpConnectionError('ETLS', `TLS with the relay failed: ${err.message}`))
      // A handshake that stalls ends when the set-up's timer closes the socket (no 'error' then).
      const closed = () => done(this.failure ?? new SmtpConnectionError('ETLS', 'the relay closed the connection during the TLS handshake'))
      secured.once('secureConnect', ok)
      secured.once('error', failed)
      secured.once('close', closed)
    })
  }

  /**
   * The reply to a message's end, about to be written: until it comes, the relay may stay silent for
   * dataEndTimeoutMs (RFC 5321 §4.5.3.2.6 gives it 10 minutes) rather than socketTimeoutMs.
   */
  private async awaitEnd (): Promise<SmtpReply> {
    const reply = this.expect(1)
    if (this.endsOwed++ === 0) this.socket.setTimeout(this.silenceLimitMs)
    try {
      return (await reply)[0]!
    } finally {
      if (--this.endsOwed === 0 && this.failure === undefined) this.socket.setTimeout(this.silenceLimitMs)
    }
  }

  private get endTimeoutMs (): number {
    return Math.max(this.ep.dataEndTimeoutMs ?? this.ep.socketTimeoutMs, this.ep.socketTimeoutMs)
  }

  /** The silence allowed now: the end limit while a message's end is owed a reply, else the command limit. */
  private get silenceLimitMs (): number {
    return this.endsOwed > 0 ? this.endTimeoutMs : this.ep.socketTimeoutMs
  }

  private command (line: string): Promise<SmtpReply> {
    const answer = this.expect(1)
    this.write(line)
    return answer.then((r) => r[0]!)
  }

  private write (data: string | Buffer): void {
    if (this.failure === undefined) this.socket.write(data)
  }

  /** Buffers written as one (corked: one writev), in order. */
  private writeAll (list: Buffer[]): void {
    if (this.failure !== undefined) return
    if (list.length === 1) {
      this.socket.write(list[0]!)
      return
    }
    this.socket.cork()
    for (const b of list) this.socket.write(b)
    this.socket.uncork()
  }

  /** A message as DATA carries it, as buffers to write. */
  private dataOf (raw: MessageBytes): Buffer[] {
    return Buffer.isBuffer(raw) ? [dataBlock(raw)] : dataChunks(raw)
  }

  /** The largest message the relay takes (its SIZE); 0 when it names none. */
  get maxSize (): number {
    return this.sizeLimit
  }

  /** The next n replies, in order. */
  private expect (n: number): Promise<SmtpReply[]> {
    if (this.failure !== undefined) return Promise.reject(this.failure)
    return new Promise<SmtpReply[]>((resolve, reject) => {
      const got: SmtpReply[] = []
      for (let i = 0; i < n; i++) {
        this.waiters.push({
          resolve: (r) => {
            got.push(r)
            if (got.length === n) resolve(got)
          },
        })
      }
      this.rejectors.push({ count: n, reject })
    })
  }

  private onReply (reply: SmtpReply): void {
    const w = this.waiters.shift()
    if (w === undefined) {
      // Unasked for: a relay that is going away says so (421) before hanging up. Only such a reply is
      // what a later hang-up is explained by: a refusal answering a command belongs to that command alone.
      if (reply.code >= 400) this.lastRefusal = reply
      return
    }
    const head = this.rejectors[0]
    if (head !== undefined && --head.count === 0) this.rejectors.shift()
    w.resolve(reply)
    if (reply.code === 421) this.fail(new SmtpConnectionError('ECLOSED', 'the relay is closing the connection', reply))
  }

  private fail (err: SmtpConnectionError): void {
    if (this.failure !== undefined) return
    this.failure = err.reply === undefined && this.lastRefusal !== undefined && err.code === 'ECLOSED'
      ? new SmtpConnectionError(err.code, err.message, this.lastRefusal)
      : err
    this.waiters = []
    const rejectors = this.rejectors
    this.rejectors = []
    for (const r of rejectors) r.reject(this.failure)
    // A transaction whose commands had not gone out waits on no reply: it fails here.
    for (const job of this.jobs.filter((j) => j.answers === undefined)) this.settle(job, this.failure)
    this.socket.destroy()
    const listeners = this.closedListeners
    this.closedListeners = []
    for (const l of listeners) l()
  }

  private readonly onData = (chunk: Buffer) => {
    let replies: SmtpReply[]
    try {
      replies = this.reader.push(chunk.toString('latin1'))
    } catch (err) {
      // The replies that came whole before the bad line still answer their commands.
      if (err instanceof SmtpProtocolError) for (const r of err.replies) this.onReply(r)
      this.fail(new SmtpConnectionError('EPROTOCOL', err instanceof SmtpProtocolError ? err.message : String(err)))
      return
    }
    for (const r of replies) this.onReply(r)
  }

  private readonly onError = (err: Error) => this.fail(new SmtpConnectionError('ECLOSED', `the connection to the relay failed: ${err.message}`))
  private readonly onEnd = () => this.fail(new SmtpConnectionError('ECLOSED', 'the relay closed the connection'))
  private readonly onTimeout = () => {
    // Silence matters only while a reply is owed; an idle connection waits for the pool to close it.
    if (this.waiters.length === 0) return
    const what = this.endsOwed > 0 ? 'to the end of a message' : 'from the relay'
    this.fail(new SmtpConnectionError('ETIMEDOUT', `no answer ${what} for ${this.silenceLimitMs} ms`))
  }

  private attach (socket: net.Socket): void {
    socket.on('data', this.onData)
    socket.on('error', this.onError)
    socket.on('close', this.onEnd)
    socket.on('end', this.onEnd)
    socket.on('timeout', this.onTimeout)
    socket.setTimeout(this.silenceLimitMs)
  }

  private detach (socket: net.Socket): void {
    socket.off('data', this.onData)
    socket.off('error', this.onError)
    socket.off('close', this.onEnd)
    socket.off('end', this.onEnd)
    socket.off('timeout', this.onTimeout)
    socket.setTimeout(0)
  }
}
