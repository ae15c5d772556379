// The part of dns-packet (which ships no types) that test/helpers/dns-server.ts uses.
declare module 'dns-packet' {
  export interface Question { type: string; name: string; class?: string }
  export interface Answer { type: string; name: string; ttl?: number; class?: string; data: unknown }
  export interface Packet {
    id?: number
    type?: 'query' | 'response'
    flags?: number
    questions?: Question[]
    answers?: Answer[]
  }
  export const RECURSION_DESIRED: number
  export const RECURSION_AVAILABLE: number
  export const AUTHORITATIVE_ANSWER: number
  export function decode (buf: Buffer): Packet
  export function encode (packet: Packet): Buffer
  const dnsPacket: {
    RECURSION_DESIRED: number
    RECURSION_AVAILABLE: number
    AUTHORITATIVE_ANSWER: number
    decode: typeof decode
    encode: typeof encode
  }
  export default dnsPacket
}
