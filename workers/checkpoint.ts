// The SQLite store's checkpoint thread (src/store/sqlite/checkpoints.ts): its own connection to the
// database file, kept open between tasks, copies the WAL's pages into the file with a PASSIVE checkpoint,
// which waits for no reader or writer and holds none up. Wiring only; when to checkpoint is decided on the
// main thread.
import Database from 'better-sqlite3'
import type { CheckpointJob, CheckpointResult } from '../src/store/sqlite/checkpoints.js'

const connections = new Map<string, Database.Database>()

export default function checkpoint (job: CheckpointJob): CheckpointResult | null {
  let db = connections.get(job.file)
  if (job.close === true) {
    db?.close()
    connections.delete(job.file)
    return null
  }
  if (db === undefined) {
    db = new Database(job.file, { fileMustExist: true })
    connections.set(job.file, db)
  }
  const [row] = db.pragma('wal_checkpoint(PASSIVE)') as Array<{ busy: number; log: number; checkpointed: number }>
  return { busy: row!.busy !== 0, log: row!.log, checkpointed: row!.checkpointed }
}
