// The ESM entry: the same module as the CommonJS one (lib/index.js).
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const tocsin = require('./index.js');

export default tocsin;
export const {
  open, Database, Transaction, Queue, Job, Stream, Event, Notification, Listener, Subscription, Wake,
  Result, Lock, RateLimit, loadablePath, load, enqueueSql, callSql, publishSql, notifySql, cronNext, versions, codes,
  TocsinError, SQLiteError, InvalidArgumentError, NotFoundError, BusyError, LeaseLostError, ClosedError,
  CorruptError, TooBigError, VersionError, CallbackError, NoMemoryError, ReplacedError, TimeoutError,
  ReadOnlyError, InterruptedError, IOError, FullError, CantOpenError, PermissionError, TaskError,
  TaskHandle, currentJob, Worker,
} = tocsin;
