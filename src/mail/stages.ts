// Where a send attempt spends its time, stage by stage, as one histogram in /metrics:
// svc_mail_stage_seconds{stage} (claim, compose, outbound, copies, render, smtp, record). The mailer and the SMTP
// transport time their own stages into the same metric; benchmarks/scenarios/smtp.ts reads its sums and
// counts before and after a run to give the per-stage breakdown.
import { Histogram, type Registry } from 'prom-client'

export type MailStage = 'claim' | 'compose' | 'outbound' | 'copies' | 'render' | 'smtp' | 'record' | 'sandbox'

export interface StageTimer {
  /** Adds the time since `startedAt` (performance.now()) to the stage. */
  since(stage: MailStage, startedAt: number): void
  /** Adds a time measured elsewhere (the SMTP thread's), in seconds. */
  observe(stage: MailStage, seconds: number): void
}

const NAME = 'svc_mail_stage_seconds'
const noop: StageTimer = { since: () => {}, observe: () => {} }

/** The registry's stage timer (made at the first call, shared by later ones); a no-op without a registry. */
export function stageTimer (registry: Registry | undefined): StageTimer {
  if (registry === undefined) return noop
  const histogram = (registry.getSingleMetric(NAME) as Histogram<'stage'> | undefined) ?? new Histogram({
    name: NAME,
    help: 'Time spent in each stage of sending an email, in seconds: claim (per claim round), compose, outbound (DKIM key and VERP), copies (in the SMTP thread: the draft made into the message, the first recipient copy made), render (MIME, the other copies, signatures), smtp (the relay transactions, waiting for a connection included), record (per recorded batch), sandbox',
    labelNames: ['stage'] as const,
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [registry],
  })
  return {
    since: (stage, startedAt) => histogram.observe({ stage }, (performance.now() - startedAt) / 1000),
    observe: (stage, seconds) => histogram.observe({ stage }, seconds),
  }
}
