package tocsin

/*
#include <stdlib.h>
#include "tocsin.h"

static tocsin_task_run *go_run_at(tocsin_task_run **runs, size_t i) { return runs[i]; }
static int64_t go_id_at(int64_t *ids, size_t i) { return ids[i]; }
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// WorkerOptions of NewWorker.
type WorkerOptions struct {
	ID              string        // a name; "": host:pid:random
	Queues          []string      // the queues to work, in order of precedence; nil: the tasks' queues
	Concurrency     int           // runs at once; 0: 1
	Visibility      time.Duration // lease of each claim, renewed by the core; 0: 30s
	ShutdownTimeout time.Duration // on stop: how long running handlers may finish; 0: 10s
	Scheduler       bool          // stand for the scheduler's leadership (cron schedules, periodic tasks)
	SchedulerTTL    time.Duration // leader lease; 0: 10s
	Logger          *slog.Logger  // nil: slog.Default()
	// A claimed job of a task this worker lacks is handed back (no attempt consumed)
	// after UnknownTaskDelay (doubling, capped at 60s; 0: 1s), and dies (UnknownTask)
	// after UnknownTaskHandbacks of them (0: 20).
	UnknownTaskDelay     time.Duration
	UnknownTaskHandbacks int
}

// Worker runs this program's tasks (Task) on the core's worker protocol: the core
// claims, renews leases, retries with backoff, hands back, recovers dead workers and
// leads the scheduler; the Worker runs handlers in goroutines and reports outcomes.
type Worker struct {
	db       *DB
	own      *DB // the worker's own handle: the core's worker steps run transactions on it
	w        *C.tocsin_worker
	opts     WorkerOptions
	log      *slog.Logger
	tasks    map[string]*taskEntry
	mu       sync.Mutex
	running  map[int64]context.CancelFunc
	handlers sync.WaitGroup
	closed   bool
	// Runs record their outcome from their own goroutine (the core batches it, or
	// writes it in a TaskTx's transaction) and take the next reserved runs there
	// (fmu: one at a time with close; closing: close has begun, record no more).
	fmu      sync.Mutex
	closing  atomic.Bool
	stopping atomic.Bool // shutting down: no more claims
	now      atomic.Bool // StopNow: no waiting for running handlers
	// Runs go to Concurrency goroutines that live as long as Run: a goroutine per run
	// would grow a fresh stack for its first cgo call, every time.
	work chan func()
	quit chan struct{}
	id   string // the id it registered under (opts.ID, or the core's host:pid:random)
	// From NewWorker on, the DB's Close reaches the worker through wt: a running
	// worker is poked and shuts down, one that never ran is closed (its handle and
	// registry row are not left behind).
	wt    *waiter
	state atomic.Int32  // workerNew, workerRunning (Run began), workerClosed (closed unrun)
	unrun chan struct{} // closed once dbClosing closed a worker that never ran
}

// NewWorker opens a worker on db for the tasks declared with Task so far, on a handle of
// its own to db's file, and writes the schedules of the periodic tasks. Run it once; a
// worker that never runs is closed (and leaves the worker registry) when db closes.
// ErrClosed when db is closed, or closes while the worker opens.
func (db *DB) NewWorker(opts WorkerOptions) (*Worker, error) {
	if db.closed.Load() {
		return nil, newErr(ErrClosed, "worker_open", "the database is closed")
	}
	r := db.registry()
	r.mu.Lock()
	tasks := make(map[string]*taskEntry, len(r.tasks))
	for k, v := range r.tasks {
		tasks[k] = v
	}
	r.mu.Unlock()
	if len(opts.Queues) == 0 {
		seen := map[string]bool{}
		for _, t := range tasks {
			if !seen[t.opts.Queue] {
				seen[t.opts.Queue] = true
				opts.Queues = append(opts.Queues, t.opts.Queue)
			}
		}
	}
	if len(opts.Queues) == 0 {
		return nil, newErr(ErrInvalid, "worker_open", "no queues (declare tasks with Task or give Queues)")
	}
	// (a negative count is refused by count below, naming it and its bounds)
	for _, f := range []struct {
		what string
		d    time.Duration
	}{{"Visibility", opts.Visibility}, {"ShutdownTimeout", opts.ShutdownTimeout}, {"SchedulerTTL", opts.SchedulerTTL},
		{"UnknownTaskDelay", opts.UnknownTaskDelay}} {
		if err := nonNeg("worker_open", "WorkerOptions."+f.what, f.d); err != nil {
			return nil, err
		}
	}
	conc, err := count("worker_open", "WorkerOptions.Concurrency", opts.Concurrency, C.TOCSIN_MAX_BATCH, "1")
	if err != nil {
		return nil, err
	}
	handbacks, err := count("worker_open", "WorkerOptions.UnknownTaskHandbacks", opts.UnknownTaskHandbacks,
		C.TOCSIN_MAX_ATTEMPTS, "20")
	if err != nil {
		return nil, err
	}
	// the core's bounds, named as WorkerOptions fields (its messages name visibility_ms...)
	if opts.Visibility != 0 && opts.Visibility < minWorkerLease {
		return nil, newErr(ErrInvalid, "worker_open", "WorkerOptions.Visibility must be 0 (30s) or at least "+
			minWorkerLease.String()+", not "+opts.Visibility.String())
	}
	if opts.SchedulerTTL != 0 {
		if err := durIn("worker_open", "WorkerOptions.SchedulerTTL", opts.SchedulerTTL, minWorkerLease, maxLease,
			" (366 days)"); err != nil {
			return nil, err
		}
	}
	for name, t := range tasks {
		if t.opts.MaxAttempts < 0 || t.opts.MaxAttempts > C.TOCSIN_MAX_ATTEMPTS {
			return nil, newErr(ErrInvalid, "worker_register", fmt.Sprintf(
				"TaskOptions.MaxAttempts of task %q must be between 1 and %d (0: the job's own), not %d",
				name, C.TOCSIN_MAX_ATTEMPTS, t.opts.MaxAttempts))
		}
		for _, f := range []struct {
			what string
			d    time.Duration
		}{{"BackoffBase", t.opts.BackoffBase}, {"BackoffCap", t.opts.BackoffCap}, {"Timeout", t.opts.Timeout}} {
			if err := nonNeg("worker_register", fmt.Sprintf("TaskOptions.%s of task %q", f.what, name), f.d); err != nil {
				return nil, err
			}
		}
	}
	if opts.Concurrency == 0 {
		opts.Concurrency, conc = 1, 1
	}
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = 10 * time.Second
	}
	var cs cstrings
	defer cs.free()
	n := len(opts.Queues)
	qs := (*[1 << 20]*C.char)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof((*C.char)(nil)))))[:n:n]
	defer C.free(unsafe.Pointer(&qs[0]))
	for i, q := range opts.Queues {
		qs[i] = cs.str(q)
	}
	var o C.tocsin_worker_opts
	o.version = C.TOCSIN_WORKER_OPTS_VERSION
	o.worker_id = cs.opt(opts.ID)
	o.queues = &qs[0]
	o.n_queues = C.size_t(n)
	o.concurrency = conc
	o.visibility_ms = C.int64_t(ms(opts.Visibility))
	if opts.Scheduler {
		o.scheduler = 1
	}
	o.scheduler_ttl_ms = C.int64_t(ms(opts.SchedulerTTL))
	o.unknown_task_delay_ms = C.int64_t(ms(opts.UnknownTaskDelay))
	o.unknown_task_handbacks = handbacks
	for name := range tasks {
		cs.str(name)
	}
	if err := cs.check("worker_open"); err != nil {
		return nil, err
	}
	own, err := Open(db.path, &db.opts)
	if err != nil {
		return nil, err
	}
	db.shareClock(own)
	var w *C.tocsin_worker
	if err := own.doCS(context.Background(), &cs, "worker_open", func(p *C.tocsin_db) C.int { return C.tocsin_worker_open(&w, p, &o) }); err != nil {
		own.Close()
		return nil, err
	}
	wk := &Worker{db: db, own: own, w: w, opts: opts, tasks: tasks, log: opts.Logger,
		running: map[int64]context.CancelFunc{}, work: make(chan func(), opts.Concurrency)}
	if wk.log == nil {
		wk.log = slog.Default()
	}
	wk.id = C.GoString(C.tocsin_worker_id(w))
	wk.log = wk.log.With("worker", wk.id)
	// (docs/worker-protocol.md: every binding warns of it, as Python and Node do)
	for _, q := range opts.Queues {
		if !queueHasTask(tasks, q) {
			wk.log.Warn("tocsin worker: no task is declared for this queue in this program: its jobs "+
				"will be handed back (and die as UnknownTask after a bound)", "queue", q)
		}
	}
	for name, t := range tasks {
		var to C.tocsin_task_opts
		to.version = C.TOCSIN_TASK_OPTS_VERSION
		to.backoff_base_ms = C.int64_t(ms(t.opts.BackoffBase))
		to.backoff_cap_ms = C.int64_t(ms(t.opts.BackoffCap))
		to.timeout_ms = C.int64_t(ms(t.opts.Timeout))
		to.result_ttl_ms = C.int64_t(ms(t.opts.ResultTTL))
		to.max_attempts = C.int(t.opts.MaxAttempts)
		cn := cs.str(name)
		if err := call("worker_register", func() C.int { return C.tocsin_worker_register(w, cn, &to) }); err != nil {
			wk.close()
			return nil, err
		}
	}
	if err := wk.writePeriodic(context.Background()); err != nil {
		wk.close()
		return nil, err
	}
	// wt is in hand before Close can fire it (dbClosing's goroutine reads it)
	wk.wt = db.waiterFor(wk.dbClosing)
	wk.unrun = make(chan struct{})
	db.watch(context.Background(), wk.wt)
	if wk.wt.isDBClosed() {
		// Close began while the worker opened (it is registered after Close took its
		// list): dbClosing closes it; it is not handed out
		<-wk.unrun
		return nil, newErr(ErrClosed, "worker_open", "the database was closed")
	}
	return wk, nil
}

func queueHasTask(tasks map[string]*taskEntry, queue string) bool {
	for _, t := range tasks {
		if t.opts.Queue == queue {
			return true
		}
	}
	return false
}

const (
	workerNew int32 = iota
	workerRunning
	workerClosed
)

// dbClosing: the DB is closing (called under the waiter's lock). A worker that never
// ran closes (on a goroutine: finish takes that lock); a running one is poked (the
// poke is kept until its next step) and shuts down.
func (wk *Worker) dbClosing() {
	if wk.state.CompareAndSwap(workerNew, workerClosed) {
		go func() {
			wk.close()
			wk.wt.finish()
			close(wk.unrun)
		}()
		return
	}
	wk.poke()
}

// ID is the id the worker registered under: WorkerOptions.ID, or host:pid:random.
func (wk *Worker) ID() string { return wk.id }

// Run works until ctx ends, then shuts down gracefully: it stops claiming, lets running
// handlers finish for ShutdownTimeout, then cancels the rest and hands their jobs back
// (pending again, no attempt consumed). A step that fails (the lock held past the busy
// timeout, a schedule that cannot fire) is logged and tried again 100 ms later. It returns
// nil after a shutdown by ctx, or ErrClosed when the DB closed, joined with the failure
// of the worker's close at the end (the hand-back of the jobs still running), if any. A Worker runs once: a
// second Run returns ErrInvalid (open another with NewWorker).
func (wk *Worker) Run(ctx context.Context) error {
	if err := nilCtx("worker", ctx); err != nil {
		return err
	}
	if !wk.state.CompareAndSwap(workerNew, workerRunning) {
		if wk.state.Load() == workerClosed {
			return newErr(ErrClosed, "worker", "the database was closed before the worker ran")
		}
		return newErr(ErrInvalid, "worker", "this worker has already run (a Worker runs once: open another with NewWorker)")
	}
	wt := wk.wt
	stop := context.AfterFunc(ctx, wk.poke)
	defer stop()
	wk.log.Info("tocsin worker started", "queues", wk.opts.Queues, "concurrency", wk.opts.Concurrency)
	wk.quit = make(chan struct{})
	defer close(wk.quit)
	for i := 0; i < wk.opts.Concurrency; i++ {
		go wk.slot(wk.quit)
	}
	var runErr error
	for ctx.Err() == nil && !wk.now.Load() { // a context that already ended claims nothing
		var runs **C.tocsin_task_run
		var n C.size_t
		// next also returns (ErrTimeout) as soon as its upkeep finds running jobs that
		// were cancelled or lost their leases: cancelReported hands them on
		err := wk.own.do(context.Background(), "worker_next", func(*C.tocsin_db) C.int {
			return C.tocsin_worker_next(wk.w, &runs, &n, -1)
		})
		if err == nil {
			wk.dispatch(runs, n)
		}
		wk.cancelReported()
		if ctx.Err() != nil {
			break
		}
		if wt.isDBClosed() {
			runErr = newErr(ErrClosed, "worker", "the database was closed")
			break
		}
		if err != nil && isCode(err, ErrClosed) {
			runErr = newErr(ErrClosed, "worker", "the database was closed")
			wk.log.Error("tocsin worker stopped", "error", err)
			break
		}
		if err != nil && !isCode(err, ErrInterrupted) && !isCode(err, ErrTimeout) {
			// a step that failed (the lock held past the busy timeout, a schedule that
			// cannot fire): nothing is lost, and the core tries the step again after a
			// pause (the next call waits it out); the worker goes on
			wk.log.Warn("tocsin worker: upkeep failed; retrying", "error", err)
		}
	}
	if err := wk.shutdown(); err != nil {
		runErr = errors.Join(runErr, err)
	}
	wt.finish()
	return runErr
}

// slot runs what dispatch hands it until Run returns.
func (wk *Worker) slot(quit chan struct{}) {
	stopped := false
	defer func() {
		if !stopped { // a handler's runtime.Goexit ended this goroutine: replace it
			go wk.slot(quit)
		}
	}()
	for {
		select {
		case f := <-wk.work:
			f()
		case <-quit:
			stopped = true
			return
		}
	}
}

// dispatch hands each run to a slot goroutine (the core hands out at most the free
// slots, so one is waiting; if not, the run gets a goroutine of its own).
func (wk *Worker) dispatch(runs **C.tocsin_task_run, n C.size_t) {
	for i := C.size_t(0); i < n; i++ {
		r := C.go_run_at(runs, i)
		id := int64(r.job_id)
		name := goStr(r.task)
		args, kwargs := raw(r.args), raw(r.kwargs)
		attempt, timeout := int(r.attempt), time.Duration(r.timeout_ms)*time.Millisecond
		t := wk.tasks[name] // the core hands out registered tasks only
		hctx, cancel := context.WithCancel(context.Background())
		if timeout > 0 {
			hctx, cancel = context.WithTimeout(context.Background(), timeout)
		}
		hctx = context.WithValue(hctx, runKey{}, RunInfo{JobID: id, Task: name, Queue: goStr(r.queue), Attempt: attempt, MaxAttempts: int(r.max_attempts), Meta: raw(r.meta)})
		wk.mu.Lock()
		wk.running[id] = cancel
		wk.mu.Unlock()
		wk.handlers.Add(1)
		f := func() {
			defer wk.handlers.Done()
			start := time.Now()
			var tx *Tx
			var v json.RawMessage
			var err error
			returned := false
			defer func() {
				if returned {
					return
				}
				// the handler called runtime.Goexit (t.FailNow): its transaction must
				// not keep the write lock, nor its job stay leased to a run that is gone
				if tx != nil {
					tx.end(false)
				}
				cancel()
				wk.finishAndTake(r, id, nil, &TaskError{Type: "Goexit", Message: "the handler called runtime.Goexit"})
			}()
			if t.inTx {
				tx, err = wk.own.begin(hctx)
			}
			if err == nil {
				v, err = safeRun(hctx, t.run, tx, args, kwargs)
			}
			returned = true
			if hctx.Err() == context.DeadlineExceeded {
				// no message: the core writes its own, the same in every runtime
				err = &TaskError{Type: "Timeout"}
			}
			cancel()
			if tx != nil && err != nil {
				tx.end(false) // the handler's writes go; the error is recorded outside
				tx = nil
			}
			lvl := slog.LevelDebug
			if err != nil {
				lvl = slog.LevelWarn
			}
			if wk.log.Enabled(context.Background(), lvl) {
				wk.log.Log(context.Background(), lvl, "tocsin task finished", "task", name, "job_id", id,
					"attempt", attempt, "duration", time.Since(start), "error", err)
			}
			if tx != nil {
				// Recorded here, inside the run's transaction, then committed: never
				// through the Run loop, which may be inside tocsin_worker_next while
				// this transaction holds the write lock (the protocol allows finish
				// from any thread).
				ferr := wk.finishTx(r, id, v, tx)
				if ferr == nil {
					ferr = tx.end(true)
				} else {
					tx.end(false)
					if isCode(ferr, ErrInvalid) || isCode(ferr, ErrTooBig) {
						// the core refused the result (nothing was written): finished
						// again outside the transaction, the core records the run as a
						// final failure (InvalidResult) naming what it refused
						wk.finishAndTake(r, id, v, nil)
						return
					}
				}
				if isCode(ferr, ErrLeaseLost) {
					// nothing was written and the run still holds a slot: end it
					// with a hand-back, which the core counts as lost
					wk.handBack(r)
				} else if ferr != nil {
					wk.log.Warn("tocsin task: its transaction did not commit", "task", name, "job_id", id, "error", ferr)
				}
				wk.forget(id)
				wk.takeNext()
			} else {
				wk.finishAndTake(r, id, v, err)
			}
		}
		select {
		case wk.work <- f:
		default:
			go f()
		}
	}
	C.tocsin_free(unsafe.Pointer(runs))
}

// handBack ends a run whose lease was lost inside its transaction (nothing written).
func (wk *Worker) handBack(r *C.tocsin_task_run) {
	wk.fmu.Lock()
	defer wk.fmu.Unlock()
	if wk.closing.Load() { // close hands it back itself
		return
	}
	var out C.tocsin_outcome
	out.version = C.TOCSIN_OUTCOME_VERSION
	out.kind = C.TOCSIN_OUTCOME_HAND_BACK
	if err := call("worker_finish", func() C.int { return C.tocsin_worker_finish(wk.w, nil, r, &out) }); err != nil {
		// the job is not pending again: it runs again when its lease lapses
		wk.log.Error("tocsin worker: handing a run back failed", "job_id", int64(r.job_id), "error", err)
	}
}

func (wk *Worker) forget(id int64) {
	wk.mu.Lock()
	delete(wk.running, id)
	wk.mu.Unlock()
}

// finishAndTake records a run's outcome from its goroutine (the core batches it into
// the next group commit and never waits for a step there), then takes reserved runs
// for the free slots: with a reserve, a slot does not wait for the Run loop.
func (wk *Worker) finishAndTake(r *C.tocsin_task_run, id int64, v json.RawMessage, runErr error) {
	wk.fmu.Lock()
	if !wk.closing.Load() { // else: close handed the job back, the outcome is dropped
		if err := wk.record(nil, r, v, runErr); err != nil && !isCode(err, ErrLeaseLost) {
			wk.log.Error("tocsin worker: recording an outcome failed", "job_id", id, "error", err)
		}
	}
	wk.fmu.Unlock()
	wk.forget(id)
	wk.takeNext()
}

func (wk *Worker) takeNext() {
	wk.fmu.Lock()
	defer wk.fmu.Unlock()
	if wk.closing.Load() || wk.stopping.Load() {
		return
	}
	var runs **C.tocsin_task_run
	var n C.size_t
	if C.tocsin_worker_take(wk.w, &runs, &n) == C.TOCSIN_OK {
		wk.dispatch(runs, n)
	}
}

func safeRun(ctx context.Context, h handler, tx *Tx, args, kwargs json.RawMessage) (v json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &TaskError{Type: "panic", Message: fmt.Sprint(p), Trace: string(debug.Stack())}
		}
	}()
	return h(ctx, tx, args, kwargs)
}

// finishTx records a TaskTx run's success inside its transaction, from the run's
// goroutine; ErrClosed once the worker is closing (its runs are handed back).
func (wk *Worker) finishTx(r *C.tocsin_task_run, id int64, v json.RawMessage, tx *Tx) error {
	wk.fmu.Lock()
	defer wk.fmu.Unlock()
	if wk.closing.Load() {
		return newErr(ErrClosed, "worker", "the worker stopped: the run was handed back")
	}
	return wk.record(tx, r, v, nil)
}

// sanitize makes a Go string text the core accepts: valid UTF-8, no NUL byte.
func sanitize(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}

// record calls tocsin_worker_finish with the outcome of a run (tx: inside it). Without
// tx an outcome whose contents the core cannot store (a result over the payload limit)
// still ends the run: the core records it as a final failure (tocsin.h).
func (wk *Worker) record(tx *Tx, run *C.tocsin_task_run, value json.RawMessage, runErr error) error {
	var cs cstrings
	defer cs.free()
	var out C.tocsin_outcome
	out.version = C.TOCSIN_OUTCOME_VERSION
	out.delay_ms = -1
	if runErr == nil {
		out.kind = C.TOCSIN_OUTCOME_OK
		out.value = cs.str(string(value))
	} else {
		out.kind = C.TOCSIN_OUTCOME_ERROR
		var p *permanent
		if errors.As(runErr, &p) {
			out.kind = C.TOCSIN_OUTCOME_FAIL
		}
		typ, msg, trace := "Error", runErr.Error(), ""
		var te *TaskError
		if errors.As(runErr, &te) {
			typ, msg, trace = te.Type, te.Message, te.Trace
		} else if errors.Is(runErr, context.Canceled) {
			typ = "Cancelled"
		}
		if typ == "" {
			typ = "Error" // the core's default type (a TaskError without one)
		}
		if strings.IndexByte(typ, 0) >= 0 {
			// no C form: refused here as the core refuses a type it cannot store (a final
			// failure naming why), never left unrecorded (the run would hold its slot and
			// its job's lease for good)
			out.kind = C.TOCSIN_OUTCOME_FAIL
			typ, msg, trace = "InvalidOutcome", "the outcome was refused: error type contains a NUL byte", ""
		}
		// a trace is any text (the core cuts it); NUL bytes and bad UTF-8 of Go strings go
		msg, trace = sanitize(msg), sanitize(trace)
		out.error_type, out.error_message, out.error_trace = cs.str(typ), cs.str(msg), cs.opt(trace)
	}
	var txp *C.tocsin_db
	if tx != nil {
		txp = tx.p
	}
	if err := cs.check("worker_finish"); err != nil {
		return err
	}
	return call("worker_finish", func() C.int { return C.tocsin_worker_finish(wk.w, txp, run, &out) })
}

// cancelReported cancels the handlers of jobs cancelled or whose lease was lost.
func (wk *Worker) cancelReported() {
	var ids *C.int64_t
	var n C.size_t
	if err := call("worker_cancelled", func() C.int { return C.tocsin_worker_cancelled(wk.w, &ids, &n) }); err != nil {
		// the handlers go on; the next upkeep reports them again
		wk.log.Warn("tocsin worker: reading the cancelled runs failed", "error", err)
		return
	}
	if n == 0 {
		return
	}
	wk.mu.Lock()
	for i := C.size_t(0); i < n; i++ {
		id := int64(C.go_id_at(ids, i))
		if cancel, ok := wk.running[id]; ok {
			wk.log.Info("tocsin task cancelled", "job_id", id)
			cancel()
		}
	}
	wk.mu.Unlock()
	C.tocsin_free(unsafe.Pointer(ids))
}

// shutdown: no more claims; finish what ends within ShutdownTimeout, hand back the rest.
// Meanwhile the core's upkeep goes on (tocsin_worker_next on a draining worker: no
// claim, no run handed out, the reserve handed back): the running jobs' leases are
// renewed and their outcomes committed. (Without it a ShutdownTimeout longer than what
// was left of a lease let the job be claimed again while its handler still ran.)
// It returns the failure of the worker's close (see close).
func (wk *Worker) shutdown() error {
	wk.stopping.Store(true) // handlers take no more runs
	wk.mu.Lock()
	if !wk.closed {
		if err := call("worker_drain", func() C.int { return C.tocsin_worker_drain(wk.w) }); err != nil {
			wk.log.Error("tocsin worker: drain failed", "error", err)
		}
	}
	wk.mu.Unlock()
	deadline := time.Now().Add(wk.opts.ShutdownTimeout)
	upkeep := true
	for {
		wk.mu.Lock()
		left := len(wk.running)
		wk.mu.Unlock()
		if left == 0 {
			break
		}
		if remaining := time.Until(deadline); remaining > 0 && !wk.now.Load() {
			if !upkeep {
				time.Sleep(2 * time.Millisecond)
				continue
			}
			ms := remaining.Milliseconds() + 1
			if ms > 50 {
				ms = 50
			}
			var runs **C.tocsin_task_run
			var n C.size_t
			// a finish wakes it: a freed slot ends the wait at once
			err := wk.own.do(context.Background(), "worker_next", func(*C.tocsin_db) C.int {
				return C.tocsin_worker_next(wk.w, &runs, &n, C.int(ms))
			})
			if err == nil {
				wk.dispatch(runs, n) // (none: a draining worker hands out nothing)
			}
			wk.cancelReported()
			if err != nil && isCode(err, ErrClosed) {
				upkeep = false
			} else if err != nil && !isCode(err, ErrInterrupted) && !isCode(err, ErrTimeout) {
				// as in Run: the core tries the step again after a pause
				wk.log.Warn("tocsin worker: upkeep failed during shutdown; retrying", "error", err)
			}
			continue
		}
		// their late outcomes are dropped: close hands the jobs back
		wk.fmu.Lock()
		wk.closing.Store(true)
		wk.fmu.Unlock()
		wk.mu.Lock()
		wk.log.Warn("tocsin worker: shutdown timeout, handing back running jobs", "running", len(wk.running))
		for _, cancel := range wk.running {
			cancel()
		}
		wk.mu.Unlock()
		break
	}
	err := wk.close() // hands back what still runs; late outcomes of those runs are dropped
	wk.log.Info("tocsin worker stopped")
	return err
}

// StopNow ends Run at once, as a second SIGINT/SIGTERM does in the other runtimes: no
// more claims, running handlers' contexts are cancelled and their jobs handed back
// (pending again, no attempt consumed), without waiting for ShutdownTimeout; also
// during a graceful shutdown already under way. Safe from any goroutine, e.g. a
// signal handler's:
//
//	sig := make(chan os.Signal, 2)
//	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
//	go func() { <-sig; cancel(); <-sig; w.StopNow() }()
func (wk *Worker) StopNow() {
	wk.now.Store(true)
	wk.poke()
}

// poke ends a blocked tocsin_worker_next (never after the worker was closed).
func (wk *Worker) poke() {
	wk.mu.Lock()
	if !wk.closed {
		C.tocsin_worker_poke(wk.w)
	}
	wk.mu.Unlock()
}

// close closes the core's worker and the worker's handle: the error of the first close
// (logged too), nil after.
func (wk *Worker) close() (err error) {
	// no TaskTx run records from now on; one recording now ends first (it never
	// waits for the write lock: its transaction holds it)
	wk.fmu.Lock()
	wk.closing.Store(true)
	wk.fmu.Unlock()
	wk.mu.Lock()
	defer wk.mu.Unlock()
	if wk.closed {
		return nil
	}
	wk.closed = true
	if err = call("worker_close", func() C.int { return C.tocsin_worker_close(wk.w) }); err != nil {
		wk.log.Error("tocsin worker: close failed", "error", err)
	}
	if cerr := wk.own.Close(); cerr != nil {
		wk.log.Error("tocsin worker: closing its handle failed", "error", cerr)
		err = errors.Join(err, cerr)
	}
	return err
}

// writePeriodic upserts the schedules of the periodic tasks ("periodic:<task>").
func (wk *Worker) writePeriodic(ctx context.Context) error {
	for name, t := range wk.tasks {
		for _, p := range t.periodic {
			env, err := wk.db.Envelope(name, p.args, p.kwargs, nil)
			if err != nil {
				return err
			}
			if _, err := wk.db.SetSchedule(ctx, "periodic:"+name, p.cron, t.opts.Queue, env, p.opts); err != nil {
				return err
			}
		}
	}
	return nil
}

type runKey struct{}

// RunInfo describes the run a handler is executing.
type RunInfo struct {
	JobID       int64
	Task, Queue string
	Attempt     int // 1 for the first run
	MaxAttempts int
	Meta        json.RawMessage // the job's meta (trace context)
}

// Run is the RunInfo of the handler's context (ok false outside a handler).
func Run(ctx context.Context) (RunInfo, bool) {
	if ctx == nil {
		return RunInfo{}, false
	}
	ri, ok := ctx.Value(runKey{}).(RunInfo)
	return ri, ok
}
