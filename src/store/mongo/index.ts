import type { Store } from '../types.js'

export interface MongoOptions { uri: string; dbName?: string }

export async function openMongoStore (_options: MongoOptions): Promise<Store> {
  throw new Error('the MongoDB store is not available in this build yet')
}
