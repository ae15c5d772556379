// What a run leaves behind: the table on stdout, a JSON record and an SVG chart in benchmarks/results/.

export interface Target {
  key: string
  /** What is compared, in words. */
  name: string
  /** The measured ratio (or value, for the absolute targets). */
  value: number
  op: '>=' | '>' | '<' | '<='
  target: number
  unit: string
  met: boolean | null
  detail: string
}

export function judge (value: number, op: Target['op'], target: number): boolean | null {
  if (!Number.isFinite(value)) return null
  if (op === '>=') return value >= target
  if (op === '>') return value > target
  if (op === '<=') return value <= target
  return value < target
}

export function fmt (n: number, digits = 0): string {
  if (!Number.isFinite(n)) return 'n/a'
  return n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })
}

export function ratioText (t: Target): string {
  if (!Number.isFinite(t.value)) return 'n/a'
  return t.unit === '×' ? `${fmt(t.value, 2)} ×` : `${fmt(t.value, 1)} ${t.unit}`
}

function verdict (met: boolean | null): string {
  return met === null ? 'not measured' : met ? 'met' : 'MISSED'
}

function pad (s: string, n: number): string {
  return s.length >= n ? s : s + ' '.repeat(n - s.length)
}

export function table (rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)))
  const line = (r: string[]) => '| ' + r.map((c, i) => pad(c, widths[i]!)).join(' | ') + ' |'
  const sep = '|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|'
  return [line(rows[0]!), sep, ...rows.slice(1).map(line)].join('\n')
}

export function targetRows (targets: Target[]): string[][] {
  return [
    ['target', 'measured', 'goal', 'verdict', 'from'],
    ...targets.map((t) => [t.name, ratioText(t), `${t.op === '>=' ? '≥' : t.op === '<=' ? '≤' : t.op} ${t.unit === '×' ? fmt(t.target, t.target < 1 ? 1 : 0) + ' ×' : fmt(t.target) + ' ' + t.unit}`, verdict(t.met), t.detail]),
  ]
}

/**
 * One row per target. Every bar is drawn on its own row's scale, normalised so that the goal sits on one
 * common line: for "at least" goals the bar is value ÷ goal, for "less than" goals it is goal ÷ value.
 * A bar reaching past the dashed line meets its goal. Bars are clipped at 3 × the goal.
 */
export function svgChart (targets: Target[], title: string, subtitle: string): string {
  const rowH = 44
  // Room for the longest row name on the left (13 px text, ~7 px a character) and the label on the right.
  const left = Math.max(300, 16 + 7 * Math.max(...targets.map((t) => Math.max(t.name.length, t.detail.length * 0.85))))
  const barMax = 480
  const top = 70
  const width = left + barMax + 340
  const height = top + targets.length * rowH + 50
  const clip = 3
  const x = (score: number) => left + (Math.min(score, clip) / clip) * barMax
  const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
  const parts: string[] = []
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, -apple-system, Segoe UI, sans-serif" font-size="13">`)
  parts.push(`<rect width="100%" height="100%" fill="#ffffff"/>`)
  parts.push(`<text x="16" y="26" font-size="17" font-weight="600">${esc(title)}</text>`)
  parts.push(`<text x="16" y="46" fill="#555">${esc(subtitle)}</text>`)
  for (let g = 0; g <= clip; g++) {
    const gx = x(g)
    parts.push(`<line x1="${gx}" y1="${top - 8}" x2="${gx}" y2="${top + targets.length * rowH}" stroke="${g === 1 ? '#222' : '#ddd'}" stroke-width="${g === 1 ? 1.5 : 1}" ${g === 1 ? 'stroke-dasharray="5,4"' : ''}/>`)
    parts.push(`<text x="${gx}" y="${top + targets.length * rowH + 16}" text-anchor="middle" fill="#666">${g === 1 ? 'goal' : g === 0 ? '0' : `${g} × goal`}</text>`)
  }
  targets.forEach((t, i) => {
    const y = top + i * rowH
    const score = !Number.isFinite(t.value) || t.value <= 0 ? 0 : t.op === '<' || t.op === '<=' ? t.target / t.value : t.value / t.target
    const colour = t.met === null ? '#999' : t.met ? '#2e8b57' : '#c0392b'
    parts.push(`<text x="${left - 10}" y="${y + 17}" text-anchor="end">${esc(t.name)}</text>`)
    parts.push(`<text x="${left - 10}" y="${y + 32}" text-anchor="end" fill="#777" font-size="11">${esc(t.detail)}</text>`)
    if (t.met !== null) parts.push(`<rect x="${left}" y="${y + 6}" width="${Math.max(1, x(score) - left)}" height="24" fill="${colour}" rx="2"/>`)
    const goal = `${t.op === '>=' ? '≥' : t.op === '<=' ? '≤' : t.op} ${t.unit === '×' ? fmt(t.target, t.target < 1 ? 1 : 0) : fmt(t.target)} ${t.unit}`
    const label = t.met === null ? 'not measured' : `${ratioText(t)} (goal ${goal}) ${t.met ? 'met' : 'missed'}${score > clip ? ' →' : ''}`
    parts.push(`<text x="${Math.min(x(score), left + barMax) + 8}" y="${y + 23}" fill="${colour}" font-weight="600">${esc(label)}</text>`)
  })
  parts.push(`<text x="16" y="${height - 10}" fill="#777" font-size="11">Each bar is its figure ÷ its goal ("less than" goals: goal ÷ figure); past the dashed line = met. Clipped at 3 × the goal.</text>`)
  parts.push('</svg>')
  return parts.join('\n') + '\n'
}
