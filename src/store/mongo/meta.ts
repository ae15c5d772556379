// Facts about the store itself in MongoDB: the `meta` collection, one document per name. 'secret_check'
// holds the check value of the secret the store was written under (src/domain/secret-check.ts).
import { MongoServerError, type Collection, type Db } from 'mongodb'

interface MetaDoc {
  _id: string
  value: string
}

const SECRET_CHECK = 'secret_check'

export class MongoMeta {
  private readonly meta: Collection<MetaDoc>

  constructor (db: Db) {
    this.meta = db.collection<MetaDoc>('meta')
  }

  async secretCheck (): Promise<string | null> {
    const doc = await this.meta.findOne({ _id: SECRET_CHECK })
    return typeof doc?.value === 'string' ? doc.value : null
  }

  /**
   * One upsert that sets the value only when it inserts the document: of two processes starting on a new
   * store, one inserts and the other finds its value. (Two upserts at once may both try the insert; the
   * loser gets a duplicate key error and reads the winner's value.)
   */
  async initSecretCheck (value: string): Promise<string> {
    try {
      await this.meta.updateOne({ _id: SECRET_CHECK }, { $setOnInsert: { value: String(value) } }, { upsert: true })
    } catch (err) {
      if (!(err instanceof MongoServerError && err.code === 11000)) throw err
    }
    const stored = await this.secretCheck()
    if (stored === null) throw new Error('MongoDB: the secret check value was written but cannot be read back')
    return stored
  }
}
