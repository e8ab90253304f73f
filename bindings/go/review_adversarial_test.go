package tocsin_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

// A Worker whose context already ended claims nothing: the job stays pending.
func TestWorkerRunEndedContextClaimsNothing(t *testing.T) {
	db := openDB(t)
	ran := make(chan struct{}, 1)
	tk := tocsin.Task(db, "t", func(ctx context.Context, a int) (int, error) { ran <- struct{}{}; return a, nil }, nil)
	w := must(db.NewWorker(tocsin.WorkerOptions{Logger: quiet}))
	h := must(tk.Call(bg, 1, nil))
	ctx, cancel := context.WithCancel(bg)
	cancel()
	check(t, w.Run(ctx))
	select {
	case <-ran:
		t.Fatal("the handler ran after the worker's context had ended")
	default:
	}
	j := must(db.Job(bg, h.JobID))
	if j.State != "pending" || j.Attempts != 0 {
		t.Fatalf("want the job pending and unclaimed, got %s after %d attempts", j.State, j.Attempts)
	}
}

// Periodic refuses a bad cron expression at once, not when a Worker starts.
func TestPeriodicRefusesBadCron(t *testing.T) {
	db := openDB(t)
	tk := tocsin.Task(db, "t", func(ctx context.Context, a int) (int, error) { return a, nil }, nil)
	err := tk.Periodic("61 * * * *", 1, nil)
	wantCode(t, err, tocsin.ErrInvalid)
	if !strings.Contains(err.Error(), "minute") {
		t.Fatalf("the error does not name the bad field: %v", err)
	}
	wantCode(t, tk.Periodic("", 1, nil), tocsin.ErrInvalid)
	// nothing was kept: a worker starts
	w := must(db.NewWorker(tocsin.WorkerOptions{Logger: quiet}))
	ctx, cancel := context.WithCancel(bg)
	cancel()
	check(t, w.Run(ctx))
}

// CronNext names an out-of-range `after` (the zero time.Time) instead of "invalid argument".
func TestCronNextAfterOutOfRange(t *testing.T) {
	_, _, err := tocsin.CronNext("* * * * *", time.Time{}, false)
	wantCode(t, err, tocsin.ErrInvalid)
	if !strings.Contains(err.Error(), "after") {
		t.Fatalf("the error does not name the argument: %v", err)
	}
	_, ok, err := tocsin.CronNext("* * * * *", time.UnixMilli(0), false)
	if err != nil || !ok {
		t.Fatalf("the epoch is in range: %v %v", ok, err)
	}
}

// Release of a Lock that does not hold the lock is ErrLeaseLost (as Renew), not a
// complaint about a token the caller never passed.
func TestLockReleaseNotHeld(t *testing.T) {
	db := openDB(t)
	wantCode(t, db.Lock("l", "a", time.Minute).Release(bg), tocsin.ErrLeaseLost)
	l := db.Lock("l", "a", time.Minute)
	if ok := must(l.TryAcquire(bg)); !ok {
		t.Fatal("not acquired")
	}
	check(t, l.Release(bg))
	wantCode(t, l.Release(bg), tocsin.ErrLeaseLost)
}

// A BusyTimeout under a millisecond is not rounded to 0 (the core's 5 s default).
func TestBusyTimeoutUnderAMillisecond(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.db")
	holder := openDB2(t, path)
	db, err := tocsin.Open(path, &tocsin.Options{BusyTimeout: 500 * time.Microsecond})
	check(t, err)
	defer db.Close()
	in, out := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- holder.Tx(bg, func(tx *tocsin.Tx) error {
			close(in)
			<-out
			return nil
		})
	}()
	<-in
	_, err = db.Queue("q").Enqueue(bg, 1, nil)
	close(out)
	check(t, <-done)
	wantCode(t, err, tocsin.ErrBusy)
	if strings.Contains(err.Error(), "5000 ms") {
		t.Fatalf("a 500µs busy timeout became the 5 s default: %v", err)
	}
}

// A goroutine that still uses a Tx while the transaction ends gets ErrClosed; the end
// waits for its call instead of handing the core's handle back under it (a crash, or a
// write landing in the next transaction that takes the pooled handle).
func TestTxUsedByAGoroutineWhileItEnds(t *testing.T) {
	db := openDB(t)
	var stored atomic.Int64
	for round := 0; round < 200; round++ {
		var wg sync.WaitGroup
		ready := make(chan struct{}, 4)
		errs := make(chan error, 4)
		check(t, db.Tx(bg, func(tx *tocsin.Tx) error {
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ready <- struct{}{}
					for {
						if _, err := tx.Queue("late").Enqueue(bg, 1, nil); err != nil {
							errs <- err
							return
						}
						stored.Add(1)
					}
				}()
			}
			for g := 0; g < 4; g++ {
				<-ready
			}
			return nil
		}))
		// the next transaction takes the pooled handle and rolls back
		_ = db.Tx(bg, func(tx *tocsin.Tx) error { return errors.New("roll back") })
		wg.Wait()
		for g := 0; g < 4; g++ {
			wantCode(t, <-errs, tocsin.ErrClosed)
		}
	}
	st := must(db.Queue("late").Stats(bg))
	if st.Pending != stored.Load() {
		t.Fatalf("%d enqueues succeeded, %d jobs stored", stored.Load(), st.Pending)
	}
}

// A transaction whose context ended before the commit rolls back (database/sql's
// BeginTx rule) and returns the context's error.
func TestTxContextEndedBeforeCommitRollsBack(t *testing.T) {
	db := openDB(t)
	ctx, cancel := context.WithCancel(bg)
	err := db.Tx(ctx, func(tx *tocsin.Tx) error {
		if _, err := tx.Queue("q").Enqueue(ctx, 1, nil); err != nil {
			return err
		}
		cancel() // the request went away; fn does not look
		return nil
	})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, tocsin.ErrInterrupted) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	if st := must(db.Queue("q").Stats(bg)); st.Pending != 0 {
		t.Fatalf("the transaction committed %d jobs after its context ended", st.Pending)
	}
}

// Cancelling a running job cancels its handler's context (the Run loop's waits are
// bounded, so the upkeep's report reaches the handler without another job arriving).
func TestCancelRunningJobCancelsHandler(t *testing.T) {
	db := openDB(t)
	started := make(chan struct{})
	stopped := make(chan error, 1)
	tk := tocsin.Task(db, "t", func(ctx context.Context, a int) (int, error) {
		close(started)
		<-ctx.Done()
		stopped <- ctx.Err()
		return 0, ctx.Err()
	}, nil)
	w := must(db.NewWorker(tocsin.WorkerOptions{Logger: quiet}))
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	h := must(tk.Call(bg, 1, nil))
	<-started
	check(t, db.Cancel(bg, h.JobID))
	within(t, 30*time.Second, "the cancelled job's handler", func() {
		if err := <-stopped; !errors.Is(err, context.Canceled) {
			t.Errorf("want context.Canceled, got %v", err)
		}
	})
	cancel()
	check(t, <-done)
	j := must(db.Job(bg, h.JobID))
	if j.State != "dead" || j.Reason != "cancelled" || j.Attempts != 1 {
		t.Fatalf("want dead (cancelled) after 1 attempt, got %s (%s) after %d", j.State, j.Reason, j.Attempts)
	}
}

// A handler's TaskError whose Type holds a NUL byte (no C form) still ends the run, as
// the core ends one whose type it refuses: a final InvalidOutcome failure, not a run that
// keeps its slot and its job's lease for good.
func TestTaskErrorTypeWithNULEndsTheRun(t *testing.T) {
	db := openDB(t)
	tk := tocsin.Task(db, "t", func(ctx context.Context, a int) (int, error) {
		return 0, &tocsin.TaskError{Type: "Bad\x00Type", Message: "m"}
	}, nil)
	w := must(db.NewWorker(tocsin.WorkerOptions{Logger: quiet}))
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	for i := 0; i < 2; i++ { // the second runs only if the first freed the slot
		h := must(tk.Call(bg, i, nil))
		var r *tocsin.Result
		within(t, 30*time.Second, "the run's outcome", func() { r = must(h.Result(bg)) })
		if r.Err == nil || r.Err.Type != "InvalidOutcome" || !strings.Contains(r.Err.Message, "NUL") {
			t.Fatalf("want an InvalidOutcome naming the NUL byte, got %+v", r.Err)
		}
		if j := must(db.Job(bg, h.JobID)); j.State != "dead" {
			t.Fatalf("want the job dead, got %s", j.State)
		}
	}
	cancel()
	check(t, <-done)
}

// Exec keeps transactions db.Tx's: BEGIN on the DB is refused before it runs (every
// goroutine's calls would join it, and Close would drop them: an Enqueue that returned
// nil, lost), and so is COMMIT/ROLLBACK inside a Tx (later calls would run outside any
// transaction, and the commit fail after the writes were committed).
func TestExecTransactionControl(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e.db")
	db, err := tocsin.Open(path, nil)
	check(t, err)
	wantCode(t, db.Exec(bg, "BEGIN"), tocsin.ErrInvalid)
	wantCode(t, db.Exec(bg, "SAVEPOINT s"), tocsin.ErrInvalid)
	// a script: statement by statement, nothing runs from the refused BEGIN on
	wantCode(t, db.Exec(bg, "CREATE TABLE b(x); BEGIN; INSERT INTO b VALUES (1)"), tocsin.ErrInvalid)
	must(db.Queue("q").Enqueue(bg, 1, nil))
	check(t, db.Exec(bg, "CREATE TABLE a(x); INSERT INTO a VALUES (1)")) // ordinary SQL runs
	check(t, db.Close())
	db = openDB2(t, path)
	if st := must(db.Queue("q").Stats(bg)); st.Pending != 1 {
		t.Fatalf("the enqueue after Exec(BEGIN) was lost: %d pending", st.Pending)
	}
	for _, sql := range []string{"COMMIT", "ROLLBACK", "END"} {
		err := db.Tx(bg, func(tx *tocsin.Tx) error {
			must(tx.Queue("t").Enqueue(bg, sql, nil))
			err := tx.Exec(bg, sql)
			wantCode(t, err, tocsin.ErrInvalid)
			_, err2 := tx.Queue("t").Enqueue(bg, "after", nil) // still inside the Tx
			check(t, err2)
			return err
		})
		wantCode(t, err, tocsin.ErrInvalid)
	}
	check(t, db.Tx(bg, func(tx *tocsin.Tx) error { return tx.Exec(bg, "INSERT INTO a VALUES (2)") }))
	// a context that ended before Exec ran leaves the Tx alone
	ctx, cancel := context.WithCancel(bg)
	cancel()
	check(t, db.Tx(bg, func(tx *tocsin.Tx) error {
		if err := tx.Exec(ctx, "INSERT INTO a VALUES (3)"); !errors.Is(err, context.Canceled) {
			t.Errorf("want context.Canceled, got %v", err)
		}
		return tx.Exec(bg, "INSERT INTO a VALUES (4)")
	}))
}

// A TaskTx handler cannot end its transaction (tx.Exec("COMMIT") is refused): the run
// goes on inside it and its outcome commits with the handler's writes.
func TestTaskTxHandlerEndsItsTransaction(t *testing.T) {
	db := openDB(t)
	check(t, db.Exec(bg, "CREATE TABLE effects(n INTEGER)"))
	tk := tocsin.TaskTx(db, "t", func(ctx context.Context, tx *tocsin.Tx, a int) (int, error) {
		if err := tx.Exec(ctx, "COMMIT"); !errors.Is(err, tocsin.ErrInvalid) {
			return 0, fmt.Errorf("want ErrInvalid, got %v", err)
		}
		return a, tx.Exec(ctx, "INSERT INTO effects VALUES (1)")
	}, &tocsin.TaskOptions{BackoffBase: time.Millisecond})
	w := must(db.NewWorker(tocsin.WorkerOptions{Logger: quiet}))
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	h := must(tk.Call(bg, 1, &tocsin.CallOptions{Job: &tocsin.EnqueueOptions{MaxAttempts: 1}}))
	var r *tocsin.Result
	within(t, 30*time.Second, "the run's outcome", func() { r = must(h.Result(bg)) })
	if r.Err != nil || string(r.Value) != "1" {
		t.Fatalf("want the run to succeed with 1, got %+v %s", r.Err, r.Value)
	}
	// the handler's write committed with its outcome
	check(t, db.Exec(bg, "CREATE TABLE want(n CHECK (n = 1)); INSERT INTO want SELECT count(*) FROM effects"))
	cancel()
	check(t, <-done)
}

// A ctx deadline bounds a call's wait for another connection's write lock: the call
// returns at the deadline (ErrTimeout and ErrBusy), not after the 30 s busy timeout.
func TestContextDeadlineBoundsLockWaits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.db")
	db, err := tocsin.Open(path, &tocsin.Options{BusyTimeout: 30 * time.Second})
	check(t, err)
	t.Cleanup(func() { db.Close() })
	holder := openDB2(t, path)
	locked, release, held := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		held <- holder.Tx(bg, func(tx *tocsin.Tx) error {
			close(locked)
			<-release
			return nil
		})
	}()
	<-locked
	q := db.Queue("q")
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
		_, err := q.Enqueue(ctx, i, nil)
		cancel()
		wantCode(t, err, tocsin.ErrBusy)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("want the deadline named, got %v", err)
		}
	}
	close(release)
	check(t, <-held)
	// the bound ended with its call: later calls wait as long as they need
	must(q.Enqueue(bg, "after", nil))
	if st := must(q.Stats(bg)); st.Pending != 1 {
		t.Fatalf("want only the last enqueue, got %d pending", st.Pending)
	}
}

// A schedule that cannot fire (its cron edited around tocsin) stops neither the other
// schedules nor the worker leading the scheduler: its jobs run, and Run ends only with ctx.
func TestWorkerSurvivesADamagedSchedule(t *testing.T) {
	db := openDB(t)
	var ran atomic.Int32
	tick := tocsin.Task(db, "tick", func(ctx context.Context, a int) (int, error) { ran.Add(1); return a, nil }, nil)
	check(t, tick.Periodic("@every 100ms", 1, nil))
	_, err := db.SetSchedule(bg, "broken", "* * * * *", "default", 1, nil)
	check(t, err)
	check(t, db.Exec(bg, "UPDATE _tocsin_schedules SET cron = 'bogus', next_fire = 0 WHERE name = 'broken'"))
	stop := runWorker(t, db, tocsin.WorkerOptions{Scheduler: true})
	h := must(tick.Call(bg, 7, nil))
	var r int
	within(t, 30*time.Second, "the job's result", func() { r = must(h.Get(bg)) })
	if r != 7 {
		t.Fatalf("want 7, got %d", r)
	}
	within(t, 30*time.Second, "the periodic task", func() {
		for ran.Load() < 3 {
			time.Sleep(20 * time.Millisecond)
		}
	})
	check(t, stop()) // ended by its ctx, not by the schedule's error
}

// A write on another handle of the same file from inside the goroutine's own
// transaction is refused at once (ErrInvalid), however the path was spelled: the
// transactions were kept by path, so "dir//t.db", a symlink or a hard link waited for
// the write lock the caller holds, the whole busy timeout, and failed with ErrBusy.
// (SQLite itself refuses a WAL database opened through a hard link.)
func TestOwnTxRefusedThroughAnotherSpellingOfThePath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.db")
	db := openDB2(t, path)
	check(t, os.Symlink(path, filepath.Join(dir, "link.db")))
	for _, other := range []string{dir + string(filepath.Separator) + string(filepath.Separator) + "t.db",
		filepath.Join(dir, "link.db")} {
		db2 := openDB2(t, other)
		// (the deadline only bounds the test where the call would wait for the lock)
		ctx, cancel := context.WithTimeout(bg, 2*time.Second)
		var enqErr, txErr error
		check(t, db.Tx(bg, func(tx *tocsin.Tx) error {
			_, enqErr = db2.Queue("q").Enqueue(ctx, 1, nil)
			txErr = db2.Tx(ctx, func(*tocsin.Tx) error { return nil })
			return nil
		}))
		cancel()
		for _, err := range []error{enqErr, txErr} {
			wantCode(t, err, tocsin.ErrInvalid)
			if errors.Is(err, tocsin.ErrBusy) {
				t.Fatalf("%s: waited for the caller's own write lock: %v", other, err)
			}
		}
		// a handle on another file is not the caller's
		other2 := openDB2(t, filepath.Join(dir, "other-"+filepath.Base(other)))
		check(t, db.Tx(bg, func(tx *tocsin.Tx) error {
			_, err := other2.Queue("q").Enqueue(bg, 1, nil)
			return err
		}))
	}
}

// The core's message may already name the operation: it is not named twice.
func TestErrorNamesTheOperationOnce(t *testing.T) {
	db := openDB(t)
	err := db.Exec(bg, "SELEC 1")
	if err == nil || strings.Contains(err.Error(), "exec: exec:") || !strings.HasPrefix(err.Error(), "tocsin: exec: ") {
		t.Fatalf("%v", err)
	}
}
