// Uses every exported name of the package (checked by `tsc --noEmit --strict`, test/types.test.js).
import tocsin, {
  open, loadablePath, load, enqueueSql, callSql, publishSql, notifySql, cronNext, versions, currentJob, codes,
  Database, Transaction, Queue, Job, Stream, Event, Notification, Listener, Subscription, Wake, Result,
  Lock, RateLimit, TaskHandle, Worker,
  TocsinError, SQLiteError, InvalidArgumentError, NotFoundError, BusyError, LeaseLostError, ClosedError,
  CorruptError, TooBigError, VersionError, CallbackError, NoMemoryError, ReplacedError, TimeoutError,
  ReadOnlyError, InterruptedError, IOError, FullError, CantOpenError, PermissionError, TaskError,
} from 'tocsin';
import type {
  Json, Meta, Token, Instant, OpenOptions, EnqueueOptions, JobSpec, WaitOptions, QueueStats, TaskFunction,
  Schedule, RateDecision, RunContext, WorkerOptions, BetterSqliteLike, PruneResult,
} from 'tocsin';

interface Email { to: string }

async function main(): Promise<void> {
  const options: OpenOptions = { busyTimeout: 5000 };
  const db: Database = open('app.db', options);
  const q: Queue = db.queue('emails');
  const eo: EnqueueOptions = { priority: 1, meta: { traceparent: 'x' } as Meta, runAt: new Date() };
  const id: number = await q.enqueue({ to: 'ada@example.org' }, eo);
  const specs: JobSpec[] = [{ payload: 1 }, { payload: 2, delay: 1000 }];
  await q.enqueueMany(specs);
  const job: Job<Email> | null = await q.claim<Email>('w1', { visibility: 30000 });
  if (job) {
    const to: string = job.payload.to;
    const token: Token = job.token;
    void to;
    await q.ack(job.id, token);
  }
  const stats: QueueStats = await q.stats();
  void stats;
  await db.transaction(async (tx: Transaction) => {
    tx.exec('SELECT 1');
    await q.enqueue(null, { tx });
  });
  const ac = new AbortController();
  const w: WaitOptions = { timeout: 10, signal: ac.signal };
  for await (const j of q.jobs<Email>('w1', { signal: ac.signal })) { await j.ack(); break; }
  const stream: Stream = db.stream('orders');
  await stream.publish({ n: 1 } as Json, { key: 'k' });
  for await (const ev of stream.subscribe<{ n: number }>({ consumer: 'c', signal: ac.signal })) {
    const e: Event<{ n: number }> = ev;
    void e.payload.n;
    break;
  }
  const sub: Subscription = stream.subscribe({ fromOffset: 0 });
  sub.close();
  const l: Listener<string> = db.listen<string>('ch');
  l.on('notification', (n: Notification<string>) => { void n.payload.length; });
  l.close();
  const wake: Wake = db.subscribe();
  await wake.wait(w).catch(() => undefined);
  wake.close();
  const r: Result | null = await db.result(id);
  if (r) void r.unwrap();
  const lock: Lock = db.lock('L', { ttl: 1000 });
  await lock.tryAcquire();
  await db.withLock('L2', { ttl: 1000 }, async (held: Lock) => held.token);
  const rl: RateLimit = db.rateLimit('api', 10, 1000);
  const d: RateDecision = await rl.tryAcquire();
  void d.allowed;
  const add: TaskFunction<[number, number], number> = q.task('add', async (a: number, b: number) => {
    const ctx: RunContext | undefined = currentJob();
    void ctx;
    return a + b;
  }, { retries: 2 });
  const h: TaskHandle<number> = await add(1, 2);
  const sum: number = await h.result({ timeout: 1000 });
  void sum;
  await q.call('py_task', [1], { kwargs: { a: 1 } });
  const wo: WorkerOptions = { queues: ['emails'], concurrency: 4, scheduler: true };
  const worker: Worker = new Worker(db, wo);
  const running = worker.run({ handleSignals: true });
  await worker.stop();
  await running;
  await q.periodic('@every 1m', 'add', { args: [1, 2] });
  const s: Schedule[] = await db.schedules();
  void s;
  const p: PruneResult = await db.prune();
  void p;
  const i: Instant = Date.now();
  const next: number | null = cronNext('*/5 * * * *', i);
  void next;
  void versions().sqliteVersion;
  void codes.TOCSIN_BUSY;
  void loadablePath();
  const better: BetterSqliteLike = { loadExtension: () => undefined, prepare: () => ({}) };
  load(better);
  enqueueSql(better, 'emails', { to: 'b' });
  const callId: number = callSql(better, 'emails', 'send_email', ['b'], { kwargs: { subject: 'hi' }, resultTtl: 60000, priority: 2 });
  void callId;
  publishSql(better, 'orders', 1);
  notifySql(better, 'ch', 1);
  void tocsin.open;
  const errors: Array<new (...a: any[]) => TocsinError> = [
    SQLiteError, InvalidArgumentError, NotFoundError, BusyError, LeaseLostError, ClosedError, CorruptError,
    TooBigError, VersionError, CallbackError, NoMemoryError, ReplacedError, TimeoutError, ReadOnlyError,
    InterruptedError, IOError, FullError, CantOpenError, PermissionError, TaskError,
  ];
  try {
    await q.enqueue(1);
  } catch (e) {
    if (e instanceof TocsinError && errors.some((C) => e instanceof C)) void e.code;
    if (e instanceof TaskError) void e.type;
  }
  const classes = [Database, Transaction, Queue, Job, Stream, Event, Notification, Listener, Subscription, Wake,
    Result, Lock, RateLimit, TaskHandle, Worker];
  void classes;
  await db.close();
}

void main();
