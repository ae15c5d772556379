// The parts of the MongoDB store that live in their own collections' classes (received mail, sending),
// reached through the Store interface by one-line forwarders.
import type { EventRecord } from '../../domain/events.js'
import type {
  AcceptResult, AttachmentContent, DailyEventCount, EmailAttempt, EmailClaim, EmailLease, EmailListQuery, EmailRecord, EmailSummary, EngagementEvent, IdempotencyRecord,
  QuotaCharge, SuppressionCursor, SuppressionRecord, UnsubscribeResult,
} from '../emails.js'
import type { ReceivedQuery, ReceivedRecord } from '../received.js'
import type { DomainRecord } from '../types.js'
import { MongoDeliveries } from './deliveries.js'
import type { MongoDomains } from './domains.js'
import type { MongoEmails } from './emails.js'
import type { MongoReceived } from './received.js'
import type { MongoTemplates } from './templates.js'
import type { TemplateHead, TemplateKey, TemplateSummary, TemplateVersionRecord, TemplateVersionSummary } from '../templates.js'
import type { LimitedInsert } from '../types.js'

export abstract class MongoForwarders extends MongoDeliveries {
  /** Received mail (src/store/mongo/received.ts). */
  abstract readonly receivedMail: MongoReceived
  /** Sender domains and returning mail (src/store/mongo/domains.ts). */
  abstract readonly senderDomains: MongoDomains
  /** Sending: emails, idempotency keys, suppressions (src/store/mongo/emails.ts). */
  abstract readonly mail: MongoEmails
  /** Templates and their versions (src/store/mongo/templates.ts). */
  abstract readonly templateStore: MongoTemplates

  // Received mail (src/store/mongo/received.ts; the switch lives with the domains)

  setDomainReceiving (accountId: string, id: string, receiving: boolean, at: string): Promise<DomainRecord | null> { return this.senderDomains.setDomainReceiving(accountId, id, receiving, at) }
  findReceivingDomains (name: string, limit: number): Promise<DomainRecord[]> { return this.senderDomains.findReceivingDomains(name, limit) }
  setDomainTracking (accountId: string, id: string, tracking: { opens?: boolean; clicks?: boolean }, at: string): Promise<DomainRecord | null> { return this.senderDomains.setDomainTracking(accountId, id, tracking, at) }
  insertReceived (input: { message: ReceivedRecord; raw: Buffer; contents: Array<{ id: string; content: Buffer }>; event: EventRecord; limitBytes: number }): Promise<'recorded' | 'limit_reached'> { return this.receivedMail.insertReceived(input) }
  receivedBytes (accountId: string): Promise<number> { return this.receivedMail.receivedBytes(accountId) }
  deleteReceived (accountId: string, id: string): Promise<ReceivedRecord | null> { return this.receivedMail.deleteReceived(accountId, id) }
  listReceived (accountId: string, q: ReceivedQuery): Promise<ReceivedRecord[]> { return this.receivedMail.listReceived(accountId, q) }
  findReceived (accountId: string, id: string): Promise<ReceivedRecord | null> { return this.receivedMail.findReceived(accountId, id) }
  readReceivedRaw (accountId: string, id: string): Promise<Buffer | null> { return this.receivedMail.readReceivedRaw(accountId, id) }
  readReceivedAttachment (accountId: string, id: string, attachmentId: string): Promise<Buffer | null> { return this.receivedMail.readReceivedAttachment(accountId, id, attachmentId) }
  pruneReceived (before: string, limit: number): Promise<number> { return this.receivedMail.pruneReceived(before, limit) }

  // Sending (src/store/mongo/emails.ts)

  acceptEmails (input: { emails: EmailRecord[]; events: EventRecord[]; idempotency?: IdempotencyRecord; quota?: QuotaCharge; attachments?: AttachmentContent[] }): Promise<AcceptResult> { return this.mail.acceptEmails(input) }
  readEmailAttachments (emailId: string): Promise<Buffer[] | null> { return this.mail.readEmailAttachments(emailId) }
  pruneAttachmentContents (before: string, limit: number): Promise<number> { return this.mail.pruneAttachmentContents(before, limit) }
  readSendUsage (accountId: string, periods: string[]): Promise<Record<string, number>> { return this.mail.readSendUsage(accountId, periods) }
  findIdempotencyKey (accountId: string, key: string, now: string): Promise<IdempotencyRecord | null> { return this.mail.findIdempotencyKey(accountId, key, now) }
  pruneIdempotencyKeys (now: string): Promise<number> { return this.mail.pruneIdempotencyKeys(now) }
  findEmail (accountId: string, id: string): Promise<EmailRecord | null> { return this.mail.findEmail(accountId, id) }
  listEmails (accountId: string, query: EmailListQuery): Promise<EmailSummary[]> { return this.mail.listEmails(accountId, query) }
  countEvents (accountId: string, window: { since: string; until: string }): Promise<DailyEventCount[]> { return this.mail.countEvents(accountId, window) }
  claimDueEmails (req: EmailClaim): Promise<EmailRecord[]> { return this.mail.claimDueEmails(req) }
  nextDueAt (now: string): Promise<string | null> { return this.mail.nextDueAt(now) }
  rescheduleEmail (input: { accountId: string; id: string; scheduledAt: string; now: string }): Promise<EmailRecord | 'not_scheduled' | null> { return this.mail.rescheduleEmail(input) }
  cancelEmail (input: { accountId: string; id: string; now: string; refund?: { recipients: number; periods: string[] } }): Promise<EmailRecord | 'not_scheduled' | null> { return this.mail.cancelEmail(input) }
  recordEmailAttempt (attempt: EmailAttempt): Promise<boolean> { return this.mail.recordEmailAttempt(attempt) }
  renewEmailLeases (owner: string, leases: EmailLease[], leaseUntil: number): Promise<number> { return this.mail.renewEmailLeases(owner, leases, leaseUntil) }
  releaseEmailLeases (owner: string, leases?: EmailLease[]): Promise<number> { return this.mail.releaseEmailLeases(owner, leases) }
  findSuppressions (accountId: string, emails: string[]): Promise<SuppressionRecord[]> { return this.mail.findSuppressions(accountId, emails) }
  listSuppressions (accountId: string, opts: { limit: number; after?: SuppressionCursor }): Promise<SuppressionRecord[]> { return this.mail.listSuppressions(accountId, opts) }
  addSuppression (s: SuppressionRecord): Promise<{ created: boolean; record: SuppressionRecord }> { return this.mail.addSuppression(s) }
  deleteSuppression (accountId: string, email: string): Promise<boolean> { return this.mail.deleteSuppression(accountId, email) }
  recordEngagement (event: EngagementEvent): Promise<EventRecord | null> { return this.mail.recordEngagement(event) }
  unsubscribeRecipient (event: EngagementEvent, at: string): Promise<UnsubscribeResult> { return this.mail.unsubscribeRecipient(event, at) }
  repairInterruptedWrites (before: string): Promise<number> { return this.mail.repairInterruptedWrites(before) }

  // Templates (src/store/mongo/templates.ts)

  insertTemplate (head: TemplateHead, first: TemplateVersionRecord, limit: number): Promise<LimitedInsert | 'name_taken'> { return this.templateStore.insertTemplate(head, first, limit) }
  listTemplates (accountId: string): Promise<TemplateSummary[]> { return this.templateStore.listTemplates(accountId) }
  findTemplate (accountId: string, key: TemplateKey): Promise<TemplateHead | null> { return this.templateStore.findTemplate(accountId, key) }
  findTemplateVersion (accountId: string, id: string, version: number): Promise<TemplateVersionRecord | null> { return this.templateStore.findTemplateVersion(accountId, id, version) }
  listTemplateVersions (accountId: string, id: string, page: { limit: number; before?: number }): Promise<TemplateVersionSummary[]> { return this.templateStore.listTemplateVersions(accountId, id, page) }
  updateTemplate (accountId: string, id: string, expectedVersion: number, next: TemplateVersionRecord, name?: string): Promise<'updated' | 'conflict' | 'not_found' | 'name_taken'> { return this.templateStore.updateTemplate(accountId, id, expectedVersion, next, name) }
  deleteTemplate (accountId: string, id: string): Promise<boolean> { return this.templateStore.deleteTemplate(accountId, id) }
}
