// Type declarations of the tocsin Node.js binding (lib/index.js, lib/tasks.js, lib/worker.js).
// Durations and instants are integer milliseconds (instants since the Unix epoch; a Date is
// accepted where an instant is). Fencing tokens are bigint. Any integer argument (a
// duration, an instant, a count, a priority, a job id) may also be given as a bigint
// within its range (Int); integers read back are numbers, and bigint beyond the safe
// integers (a stream offset, a notification id or a priority past 2^53: Int there).
// Where the core would read 0 as "none" or "the default" (expires, a result's ttl,
// resultTtl, a task's timeout, maxPayload, a worker's visibility, ...), 0 is refused with
// InvalidArgumentError, as in Python: leave the option out instead. 0 keeps its meaning
// where it has one (delay: 0, a wait's timeout: 0, shutdownTimeout: 0, maxAge: 0).

/// <reference types="node" />
import { EventEmitter } from 'events';

/** A JSON value as read: an integer beyond the safe integers (another runtime wrote it) is the exact bigint. */
export type Json = null | boolean | number | bigint | string | Json[] | { [key: string]: Json };
/**
 * What a payload, meta, result or task argument may be: any value JSON.stringify writes
 * as itself. Refused with InvalidArgumentError before anything is written: NaN and
 * +/-Infinity, a Map or a Set at any depth, and undefined as the value itself
 * (except where the argument is optional: notify's and schedule's payload, a task's
 * return value, which store null). toJSON() is honoured (a Date is its ISO string); an
 * undefined member of an object is left out, one in an array is null. A bigint at any depth
 * is written as its exact digits (a JSON integer).
 */
export type JsonValue = unknown;
export type Meta = { [key: string]: Json };
export type Token = bigint | string;
/** An integer argument: a number, or a bigint within the argument's range. */
export type Int = number | bigint;
export type Instant = Int | Date;

export interface OpenOptions {
  /** How long a writer waits for the lock (ms, 1 to 2^31 - 1); default 5000. */
  busyTimeout?: Int;
  /** Payload size limit in bytes (>= 1); default 1 MiB. */
  maxPayload?: Int;
  readOnly?: boolean;
  /** open even though another copy of SQLite is loaded in the process (it must never open this file) */
  allowOtherSqlite?: boolean;
}

export interface TxOption { tx?: Transaction }

export interface EnqueueOptions extends TxOption {
  priority?: Int;
  /** ms from now (0: now) */
  delay?: Int;
  /** the run time (> 0); give delay or runAt, not both */
  runAt?: Instant;
  /** 1 to 1000000; default 3 */
  maxAttempts?: Int;
  /** ms (> 0): discarded (dead, 'expired') if not claimed within this; default never */
  expires?: Int;
  uniqueKey?: string;
  meta?: Meta;
}

export interface JobSpec extends Omit<EnqueueOptions, 'tx'> {
  payload: unknown;
  /** another queue than the one enqueueMany is called on */
  queue?: string;
}

export interface WaitOptions {
  /** ms; rejects with TimeoutError after it */
  timeout?: Int;
  signal?: AbortSignal;
}

/** queue.stats(); db.stats() gives one per queue with jobs (live or dead) or a pause setting. The core's keys (docs/sql.md), as every binding has them. */
export interface QueueStats {
  queue: string;
  /** due now */
  pending: number;
  /** pending with a run time still ahead (delay, runAt, a retry's backoff) */
  scheduled: number;
  /** claimed, under a lease */
  processing: number;
  dead: number;
  /** now minus the earliest run time among the due pending jobs, 0 when none (never negative) */
  oldest_pending_age_ms: number;
  paused: boolean;
}

export declare class Job<P = any> {
  readonly id: number;
  readonly queue: string;
  readonly state: 'scheduled' | 'pending' | 'processing' | 'dead';
  readonly payload: P;
  readonly payloadJson: string;
  readonly meta: Meta | null;
  /** a bigint beyond the safe integers (any 64-bit priority is taken) */
  readonly priority: Int;
  readonly attempts: number;
  readonly maxAttempts: number;
  /** The lease's fencing token: pass it back as given. */
  readonly token: bigint;
  readonly runAt: number;
  readonly createdAt: number;
  readonly leaseUntil: number;
  readonly expiresAt: number;
  readonly uniqueKey: string | null;
  readonly worker: string | null;
  readonly lastError: string | null;
  readonly reason: 'failed' | 'max_attempts' | 'expired' | 'cancelled' | null;
  readonly diedAt: number;
  ack(options?: TxOption): Promise<boolean>;
  retry(options?: RetryOptions): Promise<boolean>;
  fail(options?: FailOptions): Promise<boolean>;
  heartbeat(options?: HeartbeatOptions): Promise<boolean>;
  cancel(): Promise<boolean>;
  /** Acks the job and saves its result (no value: null). */
  complete(value?: JsonValue, options?: CompleteOptions): Promise<boolean>;
  toJSON(): object;
}

export interface LeaseOptions extends TxOption { token?: Token }
export interface RetryOptions extends LeaseOptions { delay?: number; error?: string }
export interface FailOptions extends LeaseOptions { error?: string }
export interface HeartbeatOptions extends LeaseOptions { extend?: number }
export interface CompleteOptions extends LeaseOptions {
  /** ms (> 0) the result is kept; default forever */
  ttl?: number;
}
export interface ClaimOptions { visibility?: number }
export interface JobsOptions extends ClaimOptions { signal?: AbortSignal; batch?: number }

export interface TaskOptions extends Omit<EnqueueOptions, 'tx' | 'maxAttempts' | 'uniqueKey' | 'runAt'> {
  /** attempts after the first; a worker of this process runs a job of the task at most
   * retries + 1 times, also when it was called by name (queue.call, another runtime) */
  retries?: number;
  /** a run longer than this (ms, > 0) fails the attempt with error type Timeout; default none */
  timeout?: number;
  /** how long results are kept (ms, > 0); default the core's (one day) */
  resultTtl?: number;
  /** the retry delay's base (ms, > 0; exponential, capped, jittered); default 1000 */
  backoffBase?: number;
  /** the retry delay's cap (ms, > 0); default the core's */
  backoffCap?: number;
  /** run the handler with currentJob().tx and commit its ack in that transaction */
  transactional?: boolean;
}

export interface CallOptions extends EnqueueOptions {
  kwargs?: { [key: string]: JsonValue };
  /** how long the result is kept (ms, > 0); default the task's */
  resultTtl?: number;
  /** a run longer than this (ms, > 0) fails the attempt; default the task's */
  timeout?: number;
}

export interface PeriodicOptions extends ScheduleOptions {
  args?: JsonValue[];
  kwargs?: { [key: string]: JsonValue };
  /** the schedule's name; default the task's name */
  name?: string;
  resultTtl?: number;
  timeout?: number;
}

export declare class TaskHandle<R = any> {
  readonly queue: Queue;
  readonly id: number;
  /** The task's value; rejects with TaskError when it failed. */
  result(options?: WaitOptions): Promise<R>;
  /** The outcome so far, or null while it runs. */
  peek(): Promise<Result<R> | null>;
  job(): Promise<Job | null>;
}

export interface TaskFunction<A extends unknown[], R> {
  (...args: A): Promise<TaskHandle<R>>;
  readonly taskName: string;
  readonly queue: Queue;
  enqueue(options?: CallOptions & { args?: A }): Promise<TaskHandle<R>>;
  run(...args: A): R | Promise<R>;
}

export declare class Queue {
  readonly db: Database;
  readonly name: string;
  enqueue(payload: JsonValue, options?: EnqueueOptions): Promise<number>;
  enqueueMany(jobs: JobSpec[], options?: TxOption): Promise<number[]>;
  claim<P = any>(workerId: string, options?: ClaimOptions): Promise<Job<P> | null>;
  claimBatch<P = any>(n: number, workerId: string, options?: ClaimOptions): Promise<Job<P>[]>;
  ack(job: Job | number, token?: Token, options?: TxOption): Promise<boolean>;
  ack(job: Job, options?: TxOption): Promise<boolean>;
  ackBatch(jobs: Array<Job | { id: number; token: Token }>, options?: TxOption): Promise<number>;
  retry(job: Job | number, options?: RetryOptions): Promise<boolean>;
  fail(job: Job | number, options?: FailOptions): Promise<boolean>;
  heartbeat(job: Job | number, options?: HeartbeatOptions): Promise<boolean>;
  complete(job: Job | number, value?: JsonValue, options?: CompleteOptions): Promise<boolean>;
  failTask(job: Job | number, type: string, message?: string, options?: CompleteOptions): Promise<boolean>;
  cancel(job: Job | number): Promise<boolean>;
  /** The job of that id (a Job or its id; anything else is refused saying what it was), or null. */
  get<P = any>(id: number): Promise<Job<P> | null>;
  pause(): Promise<void>;
  resume(): Promise<void>;
  isPaused(): Promise<boolean>;
  stats(): Promise<QueueStats>;
  nextDeadline(): Promise<number | null>;
  deadLetters(options?: { afterId?: number; limit?: number }): Promise<Job[]>;
  requeue(job: Job | number): Promise<boolean>;
  /** Deletes this queue's dead jobs (that died before `before`, > 0, if given). */
  purge(options?: { before?: Instant }): Promise<number>;
  /** Resolves true once something is claimable. */
  wait(options?: WaitOptions): Promise<boolean>;
  jobs<P = any>(workerId: string, options?: JobsOptions): AsyncGenerator<Job<P>, void, undefined>;
  task<A extends unknown[], R>(name: string, fn: (...args: A) => R | Promise<R>, options?: TaskOptions): TaskFunction<A, Awaited<R>>;
  call<R = any>(name: string, args?: JsonValue[], options?: CallOptions): Promise<TaskHandle<R>>;
  tasks(): string[];
  periodic(cron: string, taskName: string, options?: PeriodicOptions): Promise<number>;
}

declare class Message<P = any> {
  /** the event's offset or the notification's id: a bigint past 2^53 */
  readonly id: Int;
  readonly payload: P;
  readonly meta: Meta | null;
  readonly createdAt: number;
  toJSON(): object;
}
export declare class Event<P = any> extends Message<P> {
  readonly offset: Int;
  readonly topic: string;
  readonly key: string | null;
}
export declare class Notification<P = any> extends Message<P> {
  readonly channel: string;
}

export interface PublishOptions extends TxOption { key?: string; meta?: Meta }
export interface SubscribeOptions {
  consumer?: string;
  fromOffset?: Int;
  /** most events per batch, 1 to 10000; default 100 */
  batch?: number;
  /** save the consumer's offset every this many events (>= 1) */
  autosaveEvery?: number;
  /** ... or when this long (ms, > 0) passed since the last save */
  autosaveMs?: number;
  /** A named consumer's offset is saved when the subscription closes (the end of a
   * for-await loop, close()): the last event handed on. Default true. */
  saveOnClose?: boolean;
  signal?: AbortSignal;
}

export declare class Stream {
  readonly db: Database;
  readonly topic: string;
  publish(payload: JsonValue, options?: PublishOptions): Promise<Int>;
  publishMany(payloads: JsonValue[], options?: TxOption & { keys?: Array<string | null> }): Promise<Int[]>;
  read<P = any>(options?: { after?: number; limit?: number }): Promise<Event<P>[]>;
  saveOffset(consumer: string, offset: Int): Promise<Int>;
  offset(consumer: string): Promise<Int>;
  trim(options?: { maxAge?: number; maxCount?: number; belowConsumers?: boolean }): Promise<number>;
  subscribe<P = any>(options?: SubscribeOptions): Subscription<P>;
}

declare class Waiting<T> implements AsyncIterable<T> {
  readonly closed: boolean;
  /** The next batch (at least one). */
  get(options?: WaitOptions): Promise<T[]>;
  [Symbol.asyncIterator](): AsyncGenerator<T, void, undefined>;
  close(): void;
}
export declare class Listener<P = any> extends Waiting<Notification<P>> {
  /** notifications lost to the bounded buffer */
  readonly dropped: number;
  on(event: 'notification', fn: (n: Notification<P>) => void): this;
  on(event: 'error', fn: (e: Error) => void): this;
  on(event: 'close', fn: () => void): this;
  once(event: 'notification' | 'error' | 'close', fn: (...args: any[]) => void): this;
  off(event: 'notification' | 'error' | 'close', fn: (...args: any[]) => void): this;
  addListener(event: 'notification' | 'error' | 'close', fn: (...args: any[]) => void): this;
  removeListener(event: 'notification' | 'error' | 'close', fn: (...args: any[]) => void): this;
}
export declare class Subscription<P = any> extends Waiting<Event<P>> {
  readonly position: Int;
  save(): void;
}
export declare class Wake {
  wait(options?: WaitOptions): Promise<true>;
  close(): void;
}

export declare class Result<T = any> {
  readonly jobId: number;
  readonly ok: boolean;
  readonly value: T | undefined;
  readonly error: { type: string; message: string; trace: string | null } | null;
  readonly createdAt: number;
  readonly expiresAt: number;
  /** The value, or throws the recorded task error as a TaskError. */
  unwrap(): T;
  /** For JSON.stringify: BigInts in the value as their decimal strings. */
  toJSON(): object;
}

export interface LockOptions { ttl?: number; owner?: string }
export declare class Lock {
  readonly db: Database;
  readonly name: string;
  readonly ttl: number;
  readonly owner: string;
  /** the fencing token of the last holding (0 before the first) */
  token: number;
  until: number;
  readonly held: boolean;
  tryAcquire(): Promise<boolean>;
  /** Waits until held; resolves to the fencing token. */
  acquire(options?: WaitOptions): Promise<number>;
  renew(options?: { ttl?: number }): Promise<boolean>;
  release(): Promise<boolean>;
}

export interface RateDecision { allowed: boolean; retryAfter: number; remaining: number }
export declare class RateLimit {
  readonly db: Database;
  readonly name: string;
  readonly limit: number;
  readonly per: number;
  tryAcquire(): Promise<RateDecision>;
  reset(): Promise<number>;
}

/** schedule() refuses 0 for maxAttempts, jobExpires and maxCatchUp (leave them out for the
 * default); in updateSchedule() 0 sets one back to its default. */
export interface ScheduleOptions {
  priority?: number;
  /** of the fired jobs, 1 to 1000000; default 3 */
  maxAttempts?: number;
  /** ms (> 0) a fired job may wait to be claimed; default never */
  jobExpires?: number;
  catchUp?: 'once' | 'all';
  /** catchUp 'all': most jobs fired for one overdue run, 1 to 100000; default 100 */
  maxCatchUp?: number;
  localTime?: boolean;
  meta?: Meta | null;
}
export interface Schedule extends Required<Omit<ScheduleOptions, 'meta'>> {
  name: string;
  cron: string;
  queue: string;
  payload: Json;
  meta: Meta | null;
  paused: boolean;
  nextFire: number;
  lastFire: number;
  lastJobId: number;
  firedCount: number;
  skippedCount: number;
  createdAt: number;
  updatedAt: number;
}

export declare class Transaction {
  readonly database: Database;
  readonly active: boolean;
  /** SQL of the application's (no result rows), inside the transaction. SQL that
   * ends it (COMMIT, ROLLBACK, END) throws InvalidArgumentError and runs nothing. */
  exec(sql: string): void;
}

export interface PruneResult { results: number; rateLimits: number; notifications: number }

export interface TransactionOptions {
  /** Aborted while the transaction waits for the write lock, that wait ends (nothing
   * begun); aborted before fn settles, the transaction rolls back instead of
   * committing. Either way transaction() rejects with the signal's reason. */
  signal?: AbortSignal;
}

export declare class Database {
  readonly path: string;
  readonly closed: boolean;
  close(): Promise<void>;
  /** Runs fn(tx) in a write transaction: committed when fn resolves, rolled back when it
   * throws. Inside fn (its awaits, the timers and promises it starts) a write on this
   * database without { tx }, and a nested transaction(), reject at once with
   * InvalidArgumentError (they would wait for fn's own write lock); reads work. */
  transaction<T>(fn: (tx: Transaction) => T | Promise<T>, options?: TransactionOptions): Promise<T>;
  /** SQL of the application's (no result rows); rejects with the error. SQL that
   * begins or ends a transaction (BEGIN, COMMIT, ROLLBACK, END, a SAVEPOINT outside
   * one) rejects with InvalidArgumentError and runs nothing: use transaction(). */
  exec(sql: string, options?: TxOption): Promise<void>;
  now(): number;
  setTime(when: Instant | null): void;
  /** The payload size limit in bytes (>= 1). */
  setMaxPayload(bytes: number): void;
  queue(name: string): Queue;
  stream(topic: string): Stream;
  stats(): Promise<QueueStats[]>;
  notify(channel: string, payload?: JsonValue, options?: TxOption & { meta?: Meta }): Promise<Int>;
  notifications<P = any>(channel: string, options?: { afterId?: number; limit?: number }): Promise<Notification<P>[]>;
  notifyMaxId(): Promise<Int>;
  pruneNotifications(options?: { maxAge?: number; maxKeep?: number }): Promise<number>;
  setNotifyAutotrim(options?: { maxAge?: number; maxKeep?: number; oneIn?: number }): Promise<void>;
  listen<P = any>(channel: string, options?: { bufferSize?: number; signal?: AbortSignal }): Listener<P>;
  subscribe(): Wake;
  /** ttl: ms (> 0) the result is kept; default forever */
  saveResult(jobId: number, value: JsonValue, options?: TxOption & { ttl?: number }): Promise<void>;
  saveError(jobId: number, type: string, message?: string, options?: TxOption & { ttl?: number }): Promise<void>;
  result<T = any>(jobId: number): Promise<Result<T> | null>;
  checkResult<T = any>(jobId: number): Promise<Result<T> | null>;
  waitResult<T = any>(jobId: number, options?: WaitOptions): Promise<Result<T>>;
  deleteResult(jobId: number): Promise<boolean>;
  lock(name: string, options?: LockOptions): Lock;
  lockHolder(name: string): Promise<{ owner: string | null; token: number; until: number }>;
  withLock<T>(name: string, options: LockOptions & WaitOptions, fn: (lock: Lock) => T | Promise<T>): Promise<T>;
  withLock<T>(name: string, fn: (lock: Lock) => T | Promise<T>): Promise<T>;
  rateLimit(name: string, limit: number, per: number): RateLimit;
  schedule(name: string, cron: string, queue: string, payload?: JsonValue, options?: ScheduleOptions): Promise<number>;
  updateSchedule(name: string, changes: ScheduleOptions & { cron?: string; queue?: string; payload?: JsonValue }): Promise<number>;
  schedules(): Promise<Schedule[]>;
  getSchedule(name: string): Promise<Schedule | null>;
  pauseSchedule(name: string): Promise<void>;
  resumeSchedule(name: string): Promise<void>;
  unschedule(name: string): Promise<boolean>;
  schedulerTick(): Promise<number>;
  schedulerNextFire(): Promise<number | null>;
  schedulerLead(owner: string, ttl: number): Promise<{ leader: boolean; token: number }>;
  schedulerResign(owner: string): Promise<boolean>;
  prune(options?: { notificationsMaxAge?: number; notificationsMaxKeep?: number }): Promise<PruneResult>;
  call<R = any>(queue: string, name: string, args?: JsonValue[], options?: CallOptions): Promise<TaskHandle<R>>;
  taskEnvelope(name: string, args?: JsonValue[], options?: { kwargs?: { [key: string]: JsonValue }; resultTtl?: number; timeout?: number }): Promise<string>;
}

/** Checked by the constructor (InvalidArgumentError naming the option), not at run(). */
export interface WorkerOptions {
  /** default: the queues tasks were declared on (queue.task()) */
  queues?: string[] | string;
  queue?: string;
  /** 1 to 10000; default 1 */
  concurrency?: number;
  /** each claim's lease (ms, >= 3), renewed every third of it; default 30000 */
  visibility?: number;
  scheduler?: boolean;
  /** the scheduler leader's lease (ms, 3 to 366 days); default 10000 */
  schedulerTtl?: number;
  workerId?: string;
  /** ms running handlers get at stop() before they are handed back (0: at once); default 30000 */
  shutdownTimeout?: number;
  /** the first hand-back delay (ms, > 0) of a job whose task this worker lacks; default 1000 */
  unknownTaskDelay?: number;
  /** hand-backs (1 to 1000000) before such a job dies (UnknownTask); default 20 */
  unknownTaskHandbacks?: number;
}

export interface RunContext {
  jobId: number;
  token: bigint;
  attempt: number;
  maxAttempts: number;
  queue: string;
  task: string;
  meta: Meta | null;
  signal: AbortSignal;
  startedAt: number;
  /** transactional tasks: the transaction their ack commits in */
  tx: Transaction | null;
}

export declare class Worker extends EventEmitter {
  /** Throws InvalidArgumentError for a bad option (a queue name the core refuses, a bad
   * workerId, an out-of-range duration): run() does not find one later. */
  constructor(db: Database, options?: WorkerOptions);
  readonly db: Database;
  readonly queues: string[];
  readonly concurrency: number;
  readonly inFlight: number;
  /** The id it registers under: options.workerId, or a fresh host:pid:random. */
  readonly workerId: string;
  /** Runs until stop() or the signal. A step that fails (the lock held past the busy
   * timeout, a schedule that cannot fire) emits 'warning' and is retried 100 ms later;
   * only a closed database ends run() with its error ('error' hears it first). */
  run(options?: { signal?: AbortSignal; handleSignals?: boolean }): Promise<void>;
  stop(): Promise<void>;
}

/** The run a worker is executing (inside a task handler), or undefined. */
export declare function currentJob(): RunContext | undefined;

export declare function open(path: string, options?: OpenOptions): Database;
export declare function loadablePath(): string;

/** A better-sqlite3 Database (structural: anything with loadExtension and prepare). */
export interface BetterSqliteLike {
  loadExtension(path: string, entryPoint?: string): unknown;
  prepare(sql: string): any;
}
export declare function load<T extends BetterSqliteLike>(betterDb: T): T;
export declare function enqueueSql(betterDb: BetterSqliteLike, queue: string, payload: JsonValue, options?: Omit<EnqueueOptions, 'tx'>): number;
export declare function callSql(betterDb: BetterSqliteLike, queue: string, task: string, args?: JsonValue[] | null,
  options?: Omit<EnqueueOptions, 'tx'> & { kwargs?: { [key: string]: JsonValue } | null; resultTtl?: Int; timeout?: Int }): number;
export declare function publishSql(betterDb: BetterSqliteLike, topic: string, payload: JsonValue, options?: { key?: string; meta?: Meta }): Int;
export declare function notifySql(betterDb: BetterSqliteLike, channel: string, payload: JsonValue, options?: { meta?: Meta }): Int;
export declare function cronNext(expr: string, after?: Instant | null, options?: { localTime?: boolean }): number | null;
export declare function versions(): { version: string; versionNumber: number; compiledVersion: string; schemaVersion: number; sqliteVersion: string | null };
export declare const codes: { [code: string]: number };

export declare class TocsinError extends Error {
  /** 'TOCSIN_INVALID', 'TOCSIN_BUSY', ... */
  readonly code: string;
  readonly errno: number;
  /** SQLite's result code, 0 if none (through enqueueSql & co.: the primary code of better-sqlite3's error, its `cause`) */
  readonly sqliteCode: number;
}
export declare class SQLiteError extends TocsinError {}
export declare class InvalidArgumentError extends TocsinError {}
export declare class NotFoundError extends TocsinError {}
export declare class BusyError extends TocsinError {}
export declare class LeaseLostError extends TocsinError {}
export declare class ClosedError extends TocsinError {}
export declare class CorruptError extends TocsinError {}
export declare class TooBigError extends TocsinError {}
export declare class VersionError extends TocsinError {}
export declare class CallbackError extends TocsinError {}
export declare class NoMemoryError extends TocsinError {}
export declare class ReplacedError extends TocsinError {}
export declare class TimeoutError extends TocsinError {}
export declare class ReadOnlyError extends TocsinError {}
export declare class InterruptedError extends TocsinError {}
export declare class IOError extends TocsinError {}
export declare class FullError extends TocsinError {}
export declare class CantOpenError extends TocsinError {}
export declare class PermissionError extends TocsinError {}
export declare class TaskError extends TocsinError {
  readonly type: string;
  readonly taskMessage: string;
  readonly jobId: number;
  readonly trace: string | null;
}

declare const tocsin: {
  open: typeof open; loadablePath: typeof loadablePath; load: typeof load; enqueueSql: typeof enqueueSql; callSql: typeof callSql;
  publishSql: typeof publishSql; notifySql: typeof notifySql; cronNext: typeof cronNext; versions: typeof versions;
  currentJob: typeof currentJob; codes: typeof codes;
  Database: typeof Database; Transaction: typeof Transaction; Queue: typeof Queue; Job: typeof Job;
  Stream: typeof Stream; Event: typeof Event; Notification: typeof Notification; Listener: typeof Listener;
  Subscription: typeof Subscription; Wake: typeof Wake; Result: typeof Result; Lock: typeof Lock;
  RateLimit: typeof RateLimit; TaskHandle: typeof TaskHandle; Worker: typeof Worker;
  TocsinError: typeof TocsinError; SQLiteError: typeof SQLiteError; InvalidArgumentError: typeof InvalidArgumentError;
  NotFoundError: typeof NotFoundError; BusyError: typeof BusyError; LeaseLostError: typeof LeaseLostError;
  ClosedError: typeof ClosedError; CorruptError: typeof CorruptError; TooBigError: typeof TooBigError;
  VersionError: typeof VersionError; CallbackError: typeof CallbackError; NoMemoryError: typeof NoMemoryError;
  ReplacedError: typeof ReplacedError; TimeoutError: typeof TimeoutError; ReadOnlyError: typeof ReadOnlyError;
  InterruptedError: typeof InterruptedError; IOError: typeof IOError; FullError: typeof FullError;
  CantOpenError: typeof CantOpenError; PermissionError: typeof PermissionError; TaskError: typeof TaskError;
};
export default tocsin;
