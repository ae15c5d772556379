// Small statistics: percentiles and medians, nothing clever.

export function percentile (values: number[], p: number): number {
  if (values.length === 0) return NaN
  const sorted = Float64Array.from(values).sort()
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))
  return sorted[rank]!
}

export function median (values: number[]): number {
  const v = values.filter((x) => Number.isFinite(x))
  if (v.length === 0) return NaN
  const sorted = [...v].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

export function summarize (latencies: number[]): { p50: number; p90: number; p99: number; max: number; n: number } {
  if (latencies.length === 0) return { p50: NaN, p90: NaN, p99: NaN, max: NaN, n: 0 }
  const sorted = Float64Array.from(latencies).sort()
  const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!
  return { p50: at(50), p90: at(90), p99: at(99), max: sorted[sorted.length - 1]!, n: sorted.length }
}
