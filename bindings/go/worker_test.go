package tocsin_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type EmailArgs struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func runWorker(t *testing.T, db *tocsin.DB, opts tocsin.WorkerOptions) (stop func() error) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	w := must(db.NewWorker(opts))
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
}

func TestTypedTaskRoundTrip(t *testing.T) {
	db := openDB(t)
	send := tocsin.Task(db, "send_email", func(ctx context.Context, a EmailArgs) (string, error) {
		ri, ok := tocsin.Run(ctx)
		if !ok || ri.Task != "send_email" || ri.Attempt != 1 {
			return "", errors.New("no run info")
		}
		return "sent to " + a.To, nil
	}, &tocsin.TaskOptions{Queue: "mail"})
	stop := runWorker(t, db, tocsin.WorkerOptions{Concurrency: 4})
	defer stop()
	h := must(send.Call(bg, EmailArgs{To: "ann@example.com"}, nil))
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	got, err := h.Get(ctx)
	if err != nil || got != "sent to ann@example.com" {
		t.Fatal(got, err)
	}
	// by name, as another runtime would call it (kwargs)
	h2 := must(db.Call(bg, "mail", "send_email", nil, map[string]any{"to": "bob@example.com"}, nil))
	var s string
	if err := h2.Get(ctx, &s); err != nil || s != "sent to bob@example.com" {
		t.Fatal(s, err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestTaskErrorsRetriesPermanent(t *testing.T) {
	db := openDB(t)
	var calls atomic.Int32
	flaky := tocsin.Task(db, "flaky", func(ctx context.Context, n int) (int, error) {
		if calls.Add(1) < 2 {
			return 0, errors.New("first try fails")
		}
		return n * 2, nil
	}, &tocsin.TaskOptions{BackoffBase: time.Millisecond, BackoffCap: time.Millisecond})
	bad := tocsin.Task(db, "bad", func(ctx context.Context, n int) (int, error) {
		return 0, tocsin.Permanent(&tocsin.TaskError{Type: "ValueError", Message: "no"})
	}, nil)
	boom := tocsin.Task(db, "boom", func(ctx context.Context, n int) (int, error) { panic("kaboom") }, nil)
	stop := runWorker(t, db, tocsin.WorkerOptions{Concurrency: 2})
	defer stop()
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	h := must(flaky.Call(bg, 21, &tocsin.CallOptions{Job: &tocsin.EnqueueOptions{MaxAttempts: 3}}))
	if v, err := h.Get(ctx); err != nil || v != 42 {
		t.Fatal(v, err)
	}
	hb := must(bad.Call(bg, 1, &tocsin.CallOptions{Job: &tocsin.EnqueueOptions{MaxAttempts: 5}}))
	_, err := hb.Get(ctx)
	var te *tocsin.TaskError
	if !errors.As(err, &te) || te.Type != "ValueError" || te.Message != "no" {
		t.Fatal(err)
	}
	j := must(db.Job(bg, hb.JobID))
	if j.Attempts != 1 || j.State != "dead" {
		t.Fatalf("permanent error retried: %+v", j)
	}
	hp := must(boom.Call(bg, 1, &tocsin.CallOptions{Job: &tocsin.EnqueueOptions{MaxAttempts: 1}}))
	_, err = hp.Get(ctx)
	if !errors.As(err, &te) || te.Type != "panic" || te.Trace == "" {
		t.Fatal(err)
	}
}

func TestTaskMaxAttemptsBoundsCallsByName(t *testing.T) {
	db := openDB(t)
	var calls atomic.Int32
	tocsin.Task(db, "once", func(ctx context.Context, n int) (int, error) {
		calls.Add(1)
		return 0, errors.New("fails")
	}, &tocsin.TaskOptions{Queue: "bounded", MaxAttempts: 1})
	stop := runWorker(t, db, tocsin.WorkerOptions{})
	defer stop()
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	// by name, as another runtime would call it, allowing 5 runs: the task's bound wins
	h := must(db.Call(bg, "bounded", "once", []any{1}, nil, &tocsin.CallOptions{Job: &tocsin.EnqueueOptions{MaxAttempts: 5}}))
	var v int
	var te *tocsin.TaskError
	if err := h.Get(ctx, &v); !errors.As(err, &te) {
		t.Fatal(err)
	}
	j := must(db.Job(bg, h.JobID))
	if j.Attempts != 1 || j.State != "dead" || j.Reason != "max_attempts" || calls.Load() != 1 {
		t.Fatalf("task bound not kept: %+v (%d runs)", j, calls.Load())
	}
	db2 := openDB(t)
	tocsin.Task(db2, "over", func(ctx context.Context, n int) (int, error) { return n, nil },
		&tocsin.TaskOptions{MaxAttempts: 1000001})
	if _, err := db2.NewWorker(tocsin.WorkerOptions{Logger: quiet}); !errors.Is(err, tocsin.ErrInvalid) ||
		!strings.Contains(err.Error(), "TaskOptions.MaxAttempts of task \"over\" must be between 1 and 1000000") {
		t.Fatal(err)
	}
}

func TestWorkerGracefulShutdown(t *testing.T) {
	db := openDB(t)
	started := make(chan struct{}, 4)
	release := make(chan struct{})
	var finished atomic.Int32
	slow := tocsin.Task(db, "slow", func(ctx context.Context, n int) (int, error) {
		started <- struct{}{}
		select {
		case <-release:
			finished.Add(1)
			return n, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}, &tocsin.TaskOptions{Queue: "slow"})
	// 1: a handler that finishes within the shutdown timeout is recorded
	stop := runWorker(t, db, tocsin.WorkerOptions{Concurrency: 2, ShutdownTimeout: 5 * time.Second})
	h := must(slow.Call(bg, 1, nil))
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	time.Sleep(50 * time.Millisecond)
	// stop claiming: a job enqueued now stays pending
	later := must(slow.Call(bg, 2, nil))
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if v, err := h.Get(bg); err != nil || v != 1 {
		t.Fatal(v, err)
	}
	if j := must(db.Job(bg, later.JobID)); j.State != "pending" || j.Attempts != 0 {
		t.Fatalf("claimed during shutdown: %+v", j)
	}
	// 2: a handler still running at the timeout is cancelled and its job handed back
	release2 := make(chan struct{})
	stuck := tocsin.Task(db, "stuck", func(ctx context.Context, n int) (int, error) {
		started <- struct{}{}
		select {
		case <-release2:
		case <-ctx.Done():
		}
		return 0, ctx.Err()
	}, &tocsin.TaskOptions{Queue: "stuck"})
	defer close(release2)
	stop = runWorker(t, db, tocsin.WorkerOptions{Queues: []string{"stuck"}, ShutdownTimeout: 50 * time.Millisecond})
	hs := must(stuck.Call(bg, 1, nil))
	<-started
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	j := must(db.Job(bg, hs.JobID))
	if j.State != "pending" {
		t.Fatalf("not handed back: %+v", j)
	}
}

// A shutdown longer than the lease: the core's upkeep goes on while the handler
// finishes, so its lease is renewed and nobody else claims the job meanwhile (the
// lease used to lapse during the shutdown, and the job ran again elsewhere).
func TestWorkerShutdownKeepsRenewingLeases(t *testing.T) {
	db := openDB(t)
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	slow := tocsin.Task(db, "slowlease", func(ctx context.Context, n int) (int, error) {
		started <- struct{}{}
		<-release
		return n, nil
	}, &tocsin.TaskOptions{Queue: "slowlease"})
	stop := runWorker(t, db, tocsin.WorkerOptions{Visibility: 30 * time.Millisecond, ShutdownTimeout: 30 * time.Second})
	h := must(slow.Call(bg, 7, nil))
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	for i := 0; i < 10; i++ { // many leases long
		time.Sleep(30 * time.Millisecond)
		if jobs := must(db.Queue("slowlease").Claim(bg, "rival", 1, time.Minute)); len(jobs) != 0 {
			t.Fatalf("claimed by another worker while its handler ran: %+v", jobs[0])
		}
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if v, err := h.Get(bg); err != nil || v != 7 {
		t.Fatal(v, err)
	}
}

func TestWorkerEndsOnClose(t *testing.T) {
	db := must(tocsin.Open(t.TempDir()+"/w.db", nil))
	tocsin.Task(db, "noop", func(ctx context.Context, n int) (int, error) { return n, nil }, nil)
	w := must(db.NewWorker(tocsin.WorkerOptions{Logger: quiet}))
	done := make(chan error, 1)
	go func() { done <- w.Run(bg) }()
	time.Sleep(30 * time.Millisecond)
	db.Close()
	select {
	case err := <-done:
		if !errors.Is(err, tocsin.ErrClosed) {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("worker did not end on Close")
	}
}

func TestPeriodicTask(t *testing.T) {
	db := openDB(t)
	var ran atomic.Int32
	tick := tocsin.Task(db, "tick", func(ctx context.Context, a map[string]int) (int, error) {
		ran.Add(1)
		return a["n"], nil
	}, nil)
	check(t, tick.Periodic("@every 100ms", map[string]int{"n": 1}, nil))
	stop := runWorker(t, db, tocsin.WorkerOptions{Scheduler: true})
	defer stop()
	s := must(db.GetSchedule(bg, "periodic:tick"))
	if s.Queue != "default" {
		t.Fatalf("%+v", s)
	}
	deadline := time.Now().Add(10 * time.Second)
	for ran.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if ran.Load() == 0 {
		t.Fatal("the periodic task never ran")
	}
}

func TestWorkerBadInput(t *testing.T) {
	db := openDB(t)
	_, err := db.NewWorker(tocsin.WorkerOptions{})
	wantCode(t, err, tocsin.ErrInvalid)
	_, err = db.NewWorker(tocsin.WorkerOptions{Queues: []string{"q"}, Concurrency: -1})
	wantCode(t, err, tocsin.ErrInvalid)
	_, err = db.NewWorker(tocsin.WorkerOptions{Queues: []string{""}})
	wantCode(t, err, tocsin.ErrInvalid)
	_, err = db.NewWorker(tocsin.WorkerOptions{Queues: []string{"q"}, UnknownTaskHandbacks: -1})
	wantCode(t, err, tocsin.ErrInvalid)
}

// Without an ID a worker takes the core's host:pid:random, and logs under it.
func TestWorkerID(t *testing.T) {
	db := openDB(t)
	for _, tc := range []struct{ id, want string }{{"", ""}, {"w-7", "w-7"}} {
		wk := must(db.NewWorker(tocsin.WorkerOptions{Queues: []string{"ids"}, ID: tc.id}))
		got := wk.ID()
		if tc.want == "" {
			if !regexp.MustCompile(fmt.Sprintf(`^.+:%d:[0-9a-f]{12}$`, os.Getpid())).MatchString(got) {
				t.Fatalf("default worker id %q", got)
			}
		} else if got != tc.want {
			t.Fatalf("worker id %q, want %q", got, tc.want)
		}
		ctx, cancel := context.WithCancel(bg)
		cancel()
		check(t, wk.Run(ctx))
		wantCode(t, wk.Run(ctx), tocsin.ErrInvalid) // a Worker runs once
	}
}

// A worker that never ran closes with its DB: its handle and registry row go, and a
// Run after that says why.
func TestWorkerNeverRunClosesWithTheDB(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	db, err := tocsin.Open(path, nil)
	check(t, err)
	wk := must(db.NewWorker(tocsin.WorkerOptions{Queues: []string{"idle"}}))
	check(t, db.Close())
	other := openDB2(t, path)
	check(t, other.Exec(bg, "CREATE TABLE want(n CHECK (n = 0)); INSERT INTO want SELECT count(*) FROM _tocsin_workers"))
	wantCode(t, wk.Run(bg), tocsin.ErrClosed)
}

// A job of a task no worker of the queue knows is handed back, then dies UnknownTask.
func TestUnknownTaskHandedBack(t *testing.T) {
	db := openDB(t)
	h := must(db.Call(bg, "mixed", "nobody_has_it", []any{1}, nil, nil))
	stop := runWorker(t, db, tocsin.WorkerOptions{Queues: []string{"mixed"}, UnknownTaskDelay: time.Millisecond, UnknownTaskHandbacks: 2})
	defer stop()
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	r := must(h.Result(ctx))
	if r.Err == nil || r.Err.Type != "UnknownTask" {
		t.Fatalf("%+v", r)
	}
}

// TaskTx: the handler's rows, its result and its ack commit together, or not at all.
func TestTaskTxExactlyOnce(t *testing.T) {
	db := openDB(t)
	check(t, db.Exec(bg, "CREATE TABLE ledger(job INTEGER, amount INTEGER)"))
	var fail atomic.Bool
	pay := tocsin.TaskTx(db, "pay", func(ctx context.Context, tx *tocsin.Tx, amount int) (int, error) {
		ri, _ := tocsin.Run(ctx)
		if err := tx.Exec(ctx, fmt.Sprintf("INSERT INTO ledger VALUES (%d, %d)", ri.JobID, amount)); err != nil {
			return 0, err
		}
		if fail.Load() {
			return 0, tocsin.Permanent(errors.New("card declined"))
		}
		return amount, nil
	}, nil)
	stop := runWorker(t, db, tocsin.WorkerOptions{Concurrency: 2})
	defer stop()
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	h := must(pay.Call(bg, 5, nil))
	if v, err := h.Get(ctx); err != nil || v != 5 {
		t.Fatal(v, err)
	}
	fail.Store(true)
	h2 := must(pay.Call(bg, 7, nil))
	if _, err := h2.Get(ctx); err == nil {
		t.Fatal("declined payment succeeded")
	}
	// one ledger row, of the first run: the failed run's insert was rolled back with it
	// (no query API in the binding: CHECK constraints make the assertion)
	check(t, db.Exec(bg, "CREATE TABLE want(n CHECK (n = 1), s CHECK (s = 5)); INSERT INTO want SELECT count(*), sum(amount) FROM ledger"))
	if j := must(db.Job(bg, h2.JobID)); j.State != "dead" {
		t.Fatalf("%+v", j)
	}
}

// TaskTx runs under contention from another connection: a run's transaction may
// take the write lock while the Run loop already waits for it inside
// tocsin_worker_next. Its outcome used to wait for that loop (a deadlock until the
// busy timeout); it is recorded in the run's own goroutine now. The busy timeout is
// long, so a deadlock shows as the suite's timeout, not as an error.
func TestTaskTxUnderLockContention(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	db := must(tocsin.Open(path, &tocsin.Options{BusyTimeout: 5 * time.Minute}))
	t.Cleanup(func() { db.Close() })
	other := must(tocsin.Open(path, &tocsin.Options{BusyTimeout: 5 * time.Minute}))
	t.Cleanup(func() { other.Close() })
	check(t, db.Exec(bg, "CREATE TABLE effects(job INTEGER PRIMARY KEY)"))
	effect := tocsin.TaskTx(db, "effect", func(ctx context.Context, tx *tocsin.Tx, n int) (int, error) {
		ri, _ := tocsin.Run(ctx)
		if err := tx.Exec(ctx, fmt.Sprintf("INSERT INTO effects VALUES (%d)", ri.JobID)); err != nil {
			return 0, err
		}
		time.Sleep(time.Duration(n%3) * time.Millisecond)
		return n, nil
	}, nil)
	stop := runWorker(t, db, tocsin.WorkerOptions{Concurrency: 8})
	defer stop()
	// the other connection: short write transactions, one after another
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-quit:
				return
			default:
			}
			check(t, other.Tx(bg, func(tx *tocsin.Tx) error {
				time.Sleep(time.Duration(2+i%4) * time.Millisecond)
				return tx.Exec(bg, "CREATE TABLE IF NOT EXISTS noise(x); INSERT INTO noise VALUES (1)")
			}))
			// a short gap: the lock is still held ~3/4 of the time, but a waiter can
			// win it (re-taking it at once starved the workers for 10-130 s a run)
			time.Sleep(time.Millisecond)
		}
	}()
	const n = 100
	hs := make([]*tocsin.TypedHandle[int], n)
	for i := range hs {
		hs[i] = must(effect.Call(bg, i, nil))
	}
	for i, h := range hs {
		if v, err := h.Get(bg); err != nil || v != i {
			t.Fatal(i, v, err)
		}
	}
	close(quit)
	wg.Wait()
	check(t, stop())
	// every run took effect once, with its result
	check(t, db.Exec(bg, fmt.Sprintf("CREATE TABLE want(n CHECK (n = %d)); INSERT INTO want SELECT count(*) FROM effects", n)))
}

// StopNow cuts a graceful shutdown short (a second signal): the running handler's
// context is cancelled and its job handed back at once, no attempt consumed, although
// ShutdownTimeout is an hour; before any shutdown, it ends Run the same way.
func TestWorkerStopNow(t *testing.T) {
	db := openDB(t)
	started := make(chan struct{}, 4)
	hold := tocsin.Task(db, "hold", func(ctx context.Context, n int) (int, error) {
		started <- struct{}{}
		<-ctx.Done()
		return 0, ctx.Err()
	}, &tocsin.TaskOptions{Queue: "hold"})
	for _, during := range []bool{true, false} {
		w := must(db.NewWorker(tocsin.WorkerOptions{Queues: []string{"hold"}, ShutdownTimeout: time.Hour, Logger: quiet}))
		ctx, cancel := context.WithCancel(bg)
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		h := must(hold.Call(bg, 1, nil))
		<-started
		if during {
			cancel() // the graceful shutdown begins: it would wait an hour
			select {
			case err := <-done:
				t.Fatalf("Run returned before StopNow: %v", err)
			case <-time.After(100 * time.Millisecond):
			}
		}
		w.StopNow()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return after StopNow")
		}
		cancel()
		// handed back: pending again, the attempt given back (MaxAttempts one more)
		if j := must(db.Job(bg, h.JobID)); j.State != "pending" || j.MaxAttempts != j.Attempts+3 ||
			!strings.Contains(j.LastError, "handed back") {
			t.Fatalf("during=%v: not handed back: %+v", during, j)
		}
		check(t, db.Queue("hold").Cancel(bg, h.JobID))
	}
}
