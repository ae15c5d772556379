// A sender's DKIM key, published in a test DNS server, and messages signed with it the way a sending
// MTA would (nodemailer's streamTransport, CRLF line ends): the mail the inbound tests receive.
import { generateKeyPairSync } from 'node:crypto'
import nodemailer from 'nodemailer'
import type { TestDns } from './dns-server.js'

export interface SenderKey { domain: string; selector: string; privateKey: string }

/** A fresh 2048-bit key for `domain`; its public half published at `<selector>._domainkey.<domain>` (none when `dns` is null). */
export function dkimKey (dns: TestDns | null, domain: string, selector: string): SenderKey {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', {
    modulusLength: 2048,
    publicKeyEncoding: { type: 'spki', format: 'der' },
    privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
  })
  dns?.publish(`${selector}._domainkey.${domain}`, { TXT: [`v=DKIM1; k=rsa; p=${Buffer.from(publicKey).toString('base64')}`] })
  return { domain, selector, privateKey }
}

/** The message nodemailer builds, DKIM-signed with `key`, CRLF line ends. */
export async function signedMessage (mail: nodemailer.SendMailOptions, key: SenderKey): Promise<Buffer> {
  const t = nodemailer.createTransport({
    streamTransport: true, buffer: true, newline: 'windows',
    dkim: { domainName: key.domain, keySelector: key.selector, privateKey: key.privateKey },
  })
  return (await t.sendMail(mail)).message as Buffer
}
