'use strict';
// Result codes of the core (tocsin.h) as TocsinError subclasses. Every error
// the binding raises for a core failure is made here, from the code and the
// message read on the thread that made the call.

class TocsinError extends Error {
  constructor(message, code, errno, sqliteCode) {
    super(message);
    this.name = new.target.name;
    /** 'TOCSIN_INVALID', 'TOCSIN_BUSY', ... */
    this.code = code || 'TOCSIN_ERROR';
    /** the core's numeric result code */
    this.errno = errno === undefined ? 1 : errno;
    /** SQLite's extended result code, 0 if none */
    this.sqliteCode = sqliteCode || 0;
  }
}

const CODES = [
  // [number, code name, class name]
  [1, 'TOCSIN_ERROR', 'SQLiteError'],
  [2, 'TOCSIN_INVALID', 'InvalidArgumentError'],
  [3, 'TOCSIN_NOTFOUND', 'NotFoundError'],
  [4, 'TOCSIN_BUSY', 'BusyError'],
  [5, 'TOCSIN_LEASE_LOST', 'LeaseLostError'],
  [6, 'TOCSIN_CLOSED', 'ClosedError'],
  [7, 'TOCSIN_CORRUPT', 'CorruptError'],
  [8, 'TOCSIN_TOOBIG', 'TooBigError'],
  [9, 'TOCSIN_VERSION', 'VersionError'],
  [10, 'TOCSIN_CALLBACK', 'CallbackError'],
  [11, 'TOCSIN_NOMEM', 'NoMemoryError'],
  [12, 'TOCSIN_REPLACED', 'ReplacedError'],
  [13, 'TOCSIN_TIMEOUT', 'TimeoutError'],
  [14, 'TOCSIN_READONLY', 'ReadOnlyError'],
  [15, 'TOCSIN_INTERRUPTED', 'InterruptedError'],
  [16, 'TOCSIN_IOERR', 'IOError'],
  [17, 'TOCSIN_FULL', 'FullError'],
  [18, 'TOCSIN_CANTOPEN', 'CantOpenError'],
  [19, 'TOCSIN_PERM', 'PermissionError'],
];

const classes = { TocsinError };
const byNumber = new Map();
const byCode = new Map();
for (const [num, code, cls] of CODES) {
  // a named class per code, so stack traces and instanceof read well
  const C = { [cls]: class extends TocsinError {} }[cls];
  classes[cls] = C;
  byNumber.set(num, [code, C]);
  byCode.set(code, num);
}

/** A task that ran and raised (any runtime): `type`, `message`, `trace` as recorded. */
class TaskError extends TocsinError {
  constructor(type, message, jobId, trace) {
    super(`${type}: ${message}`, 'TOCSIN_TASK_ERROR', 0, 0);
    this.type = type;
    this.taskMessage = message;
    this.jobId = jobId;
    this.trace = trace || null;
  }
}
classes.TaskError = TaskError;

function makeError(errno, message, sqliteCode) {
  const e = byNumber.get(errno);
  if (!e) return new TocsinError(message, 'TOCSIN_ERROR', errno, sqliteCode);
  return new e[1](message, e[0], errno, sqliteCode);
}

function errorOf(code, message) {
  return makeError(byCode.get(code), message, 0);
}

module.exports = { ...classes, makeError, errorOf, CODES: Object.fromEntries(CODES.map(([n, c]) => [c, n])) };
