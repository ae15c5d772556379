// Files for attachment tests: made in the test, a few KB, with the first and last bytes of the real kind.
import { randomBytes } from 'node:crypto'

/** A few KB that start like a PDF and end like one; the middle is random, so no byte pattern is special. */
export function samplePdf (size = 4096): Buffer {
  const head = Buffer.from('%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog >>\nendobj\n', 'latin1')
  const tail = Buffer.from('\ntrailer\n<< /Root 1 0 R >>\n%%EOF\n', 'latin1')
  return Buffer.concat([head, randomBytes(size - head.length - tail.length), tail])
}

/** A 1×1 PNG (signature, IHDR, IDAT, IEND). */
export const SAMPLE_PNG = Buffer.from(
  '89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63f8cfc0f01f0005000201a5b1f1b90000000049454e44ae426082',
  'hex',
)
