package tocsin_test

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

// within fails the test when f does not return within d (a hang, not a slow pass).
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %s", what, d)
	}
}

// A string with a NUL byte has no C form: it is refused, never cut at the NUL (where
// "a\x00b" would name queue "a" and two lock names would collide).
func TestNULBytesRefused(t *testing.T) {
	db := openDB(t)
	q := db.Queue("a\x00b")
	_, err := q.Enqueue(bg, 1, nil)
	wantCode(t, err, tocsin.ErrInvalid)
	if !strings.Contains(err.Error(), "NUL") {
		t.Fatalf("the error does not say what was wrong: %v", err)
	}
	_, err = db.Queue("q").Enqueue(bg, 1, &tocsin.EnqueueOptions{UniqueKey: "k\x00x"})
	wantCode(t, err, tocsin.ErrInvalid)
	_, err = db.Queue("q").Enqueue(bg, json.RawMessage("1\x00"), nil)
	wantCode(t, err, tocsin.ErrInvalid)
	_, err = db.Lock("l\x00x", "o", time.Minute).TryAcquire(bg)
	wantCode(t, err, tocsin.ErrInvalid)
	ctx, cancel := context.WithTimeout(bg, time.Second)
	defer cancel()
	wantCode(t, db.Lock("l\x00x", "o", time.Minute).Acquire(ctx), tocsin.ErrInvalid)
	wantCode(t, q.Wait(ctx), tocsin.ErrInvalid)
	_, err = q.Stats(bg)
	wantCode(t, err, tocsin.ErrInvalid)
	_, err = q.DeadLetters(bg, 0, 0)
	wantCode(t, err, tocsin.ErrInvalid)
	_, err = db.Stream("t\x00x").Publish(bg, 1, nil)
	wantCode(t, err, tocsin.ErrInvalid)
	_, err = db.Notify(bg, "c\x00x", 1, nil)
	wantCode(t, err, tocsin.ErrInvalid)
	_, err = db.Listen(bg, "c\x00x", nil)
	wantCode(t, err, tocsin.ErrInvalid)
	_, err = db.Stream("t").Subscribe(bg, "c\x00x", nil)
	wantCode(t, err, tocsin.ErrInvalid)
	_, err = db.Call(bg, "q", "t\x00x", nil, nil, nil)
	wantCode(t, err, tocsin.ErrInvalid)
	_, _, err = tocsin.CronNext("* * * * *\x00x", time.Now(), false)
	wantCode(t, err, tocsin.ErrInvalid)
	tocsin.Task(db, "n\x00x", func(ctx context.Context, a int) (int, error) { return a, nil }, nil)
	_, err = db.NewWorker(tocsin.WorkerOptions{Logger: quiet})
	wantCode(t, err, tocsin.ErrInvalid)
	// nothing was written
	all, err := db.Stats(bg)
	check(t, err)
	if len(all) != 0 {
		t.Fatalf("refused calls wrote jobs: %+v", all)
	}
	if owner, _, _, _ := db.LockHolder(bg, "l"); owner != "" {
		t.Fatalf("lock l taken by %q", owner)
	}
	if n, _ := db.NotifyMaxID(bg); n != 0 {
		t.Fatal("a refused notify was written")
	}
}

// Close must not wait for a reader of C that stopped reading: the listener and the
// subscription end with ErrClosed, and the subscription saves only what it handed on.
func TestCloseWithUndrainedListenerAndSubscription(t *testing.T) {
	db := openDB(t)
	l, err := db.Listen(bg, "c", nil)
	check(t, err)
	s := db.Stream("s")
	must(s.PublishMany(bg, []any{1, 2, 3}, nil))
	sub, err := s.Subscribe(bg, "billing", nil)
	check(t, err)
	<-sub.C // event 1 handed on; the goroutine now blocks handing on event 2
	must(db.Notify(bg, "c", 1, nil))
	time.Sleep(50 * time.Millisecond) // both goroutines block on their channel
	within(t, 5*time.Second, "Close", func() { check(t, db.Close()) })
	for range l.C {
	}
	for range sub.C {
	}
	wantCode(t, l.Err(), tocsin.ErrClosed)
	wantCode(t, sub.Err(), tocsin.ErrClosed)
	db2 := openDB2(t, db.Path())
	if off := must(db2.Stream("s").Offset(bg, "billing")); off != 1 {
		t.Fatalf("saved offset %d, want 1 (the one event handed on)", off)
	}
}

// A loop body that closes the DB must not deadlock Close on the loop's own wait.
func TestCloseInsideEventsLoop(t *testing.T) {
	db := openDB(t)
	s := db.Stream("s")
	must(s.PublishMany(bg, []any{1, 2, 3}, nil))
	var got []int64
	var last error
	within(t, 5*time.Second, "Close inside an Events loop", func() {
		for ev, err := range s.Events(bg, "c", nil) {
			if err != nil {
				last = err
				break
			}
			got = append(got, ev.ID)
			check(t, db.Close())
		}
	})
	if len(got) != 1 {
		t.Fatalf("events after Close: %v", got)
	}
	wantCode(t, last, tocsin.ErrClosed)
	db2 := openDB2(t, db.Path())
	if off := must(db2.Stream("s").Offset(bg, "c")); off != 1 {
		t.Fatalf("saved offset %d, want 1", off)
	}
}

// A cancelled context ends Events and Subscribe at once, not after the batch or the
// backlog; the saved offset is the last event handed on.
func TestStreamsStopAtCancel(t *testing.T) {
	db := openDB(t)
	s := db.Stream("s")
	vals := make([]any, 200)
	for i := range vals {
		vals[i] = i
	}
	must(s.PublishMany(bg, vals, nil))
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	n := 0
	var last error
	for _, err := range s.Events(ctx, "a", &tocsin.SubscribeOptions{Batch: 10}) {
		if err != nil {
			last = err
			break
		}
		if n++; n == 5 {
			cancel()
		}
	}
	if n != 5 || !errors.Is(last, context.Canceled) {
		t.Fatalf("Events went on after cancel: %d events, then %v", n, last)
	}
	if off := must(s.Offset(bg, "a")); off != 5 {
		t.Fatalf("saved offset %d, want 5", off)
	}
	for i := 0; i < 20; i++ { // Subscribe: the select must not pick the send after cancel
		ctx, cancel := context.WithCancel(bg)
		sub, err := s.Subscribe(ctx, "", &tocsin.SubscribeOptions{FromOffset: new(int64), Batch: 10})
		check(t, err)
		m := 0
		for range sub.C {
			if m++; m == 3 {
				cancel()
			}
		}
		cancel()
		if m != 3 {
			t.Fatalf("Subscribe handed on %d events, cancelled after 3", m)
		}
	}
}

// A loop body that panics did not process its event, and the events after it in the
// batch were never handed on: all of them come again (the offset saved at the end is
// the one before the panicking event).
func TestEventsPanicSavesWhatWasHanded(t *testing.T) {
	db := openDB(t)
	s := db.Stream("s")
	must(s.PublishMany(bg, []any{1, 2, 3, 4, 5}, nil))
	func() {
		defer func() { _ = recover() }()
		for ev, err := range s.Events(bg, "c", nil) {
			check(t, err)
			if ev.ID == 3 {
				panic("boom")
			}
		}
	}()
	if off := must(s.Offset(bg, "c")); off != 2 {
		t.Fatalf("saved offset %d, want 2 (event 3 panicked, 4 and 5 were never handed on)", off)
	}
}

// runtime.Goexit (t.FailNow) in a Tx function rolls back: the write lock is not left held.
func TestTxGoexitRollsBack(t *testing.T) {
	db := openDB(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = db.Tx(bg, func(tx *tocsin.Tx) error {
			must(tx.Queue("q").Enqueue(bg, 1, nil))
			runtime.Goexit()
			return nil
		})
	}()
	<-done
	ctx, cancel := context.WithTimeout(bg, time.Second)
	defer cancel()
	if _, err := db.Queue("q").Enqueue(ctx, 2, nil); err != nil {
		t.Fatalf("the write lock stayed taken after Goexit in Tx: %v", err)
	}
	if st := must(db.Queue("q").Stats(bg)); st.Pending != 1 {
		t.Fatalf("pending %d, want 1 (the Goexit transaction rolled back)", st.Pending)
	}
}

func TestPermanentNil(t *testing.T) {
	if err := tocsin.Permanent(nil); err != nil {
		t.Fatalf("Permanent(nil) = %v, want nil", err)
	}
}

// An outcome the core refuses (a result over the payload limit, an error type that is
// not a name, text that is not UTF-8 or holds NUL) must still end the run: the job gets
// a result at once instead of staying leased to a run that never finishes.
func TestRefusedOutcomesEndTheRun(t *testing.T) {
	db := openDB(t)
	big := strings.Repeat("x", 2<<20)
	tBig := tocsin.Task(db, "big", func(ctx context.Context, a int) (string, error) { return big, nil }, nil)
	tBigTx := tocsin.TaskTx(db, "big_tx", func(ctx context.Context, tx *tocsin.Tx, a int) (string, error) {
		must(tx.Queue("side").Enqueue(ctx, 1, nil))
		return big, nil
	}, nil)
	tUTF8 := tocsin.Task(db, "utf8", func(ctx context.Context, a int) (int, error) {
		return 0, tocsin.Permanent(errors.New("bad \xff byte and \x00 NUL"))
	}, nil)
	tNoType := tocsin.Task(db, "notype", func(ctx context.Context, a int) (int, error) {
		return 0, tocsin.Permanent(&tocsin.TaskError{Message: "no type"})
	}, nil)
	tBadType := tocsin.Task(db, "badtype", func(ctx context.Context, a int) (int, error) {
		return 0, tocsin.Permanent(&tocsin.TaskError{Type: "bad\ntype", Message: "m"})
	}, nil)
	stop := runWorker(t, db, tocsin.WorkerOptions{Concurrency: 4})
	defer stop()
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	wantTaskErr := func(what string, h *tocsin.TaskHandle, typ string) {
		t.Helper()
		r, err := h.Result(ctx)
		if err != nil {
			t.Fatalf("%s: no outcome: %v", what, err)
		}
		if r.Err == nil || r.Err.Type != typ {
			t.Fatalf("%s: result %+v, want a %s error", what, r, typ)
		}
	}
	h := must(tBig.Call(bg, 1, nil))
	wantTaskErr("too big result", &h.TaskHandle, "InvalidResult")
	h = must(tBigTx.Call(bg, 1, nil))
	wantTaskErr("too big TaskTx result", &h.TaskHandle, "InvalidResult")
	if st := must(db.Queue("side").Stats(bg)); st.Pending != 0 {
		t.Fatal("the TaskTx handler's write committed without its outcome")
	}
	hi := must(tUTF8.Call(bg, 1, nil))
	wantTaskErr("invalid UTF-8 message", &hi.TaskHandle, "Error")
	hi = must(tNoType.Call(bg, 1, nil))
	wantTaskErr("TaskError without a type", &hi.TaskHandle, "Error")
	hi = must(tBadType.Call(bg, 1, nil))
	wantTaskErr("TaskError with a bad type", &hi.TaskHandle, "InvalidOutcome")
}

// A handler that calls runtime.Goexit still ends its run (and the worker goes on).
func TestHandlerGoexitEndsTheRun(t *testing.T) {
	db := openDB(t)
	exit := tocsin.TaskTx(db, "exit", func(ctx context.Context, tx *tocsin.Tx, a int) (int, error) {
		runtime.Goexit()
		return 0, nil
	}, nil)
	ok := tocsin.Task(db, "ok", func(ctx context.Context, a int) (int, error) { return a, nil }, nil)
	stop := runWorker(t, db, tocsin.WorkerOptions{})
	defer stop()
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	h := must(exit.Call(bg, 1, &tocsin.CallOptions{Job: &tocsin.EnqueueOptions{MaxAttempts: 1}}))
	if _, err := h.Get(ctx); err == nil || !strings.Contains(err.Error(), "Goexit") {
		t.Fatalf("want the Goexit error, got %v", err)
	}
	h2 := must(ok.Call(bg, 7, nil))
	if v, err := h2.Get(ctx); err != nil || v != 7 {
		t.Fatalf("the worker did not go on: %v %v", v, err)
	}
}

// Counts beyond a C int are not wrapped (1<<32 is not 0, "the default"), and positive
// durations under a millisecond are not 0 ("none").
func TestCountsAndDurationsNotWrapped(t *testing.T) {
	db := openDB(t)
	huge := 1 << 32
	_, err := db.Queue("q").Enqueue(bg, 1, &tocsin.EnqueueOptions{MaxAttempts: huge})
	wantCode(t, err, tocsin.ErrInvalid)
	_, err = db.SetSchedule(bg, "s", "* * * * *", "q", 1, &tocsin.ScheduleOptions{MaxCatchUp: huge})
	wantCode(t, err, tocsin.ErrInvalid)
	tocsin.Task(db, "t", func(ctx context.Context, a int) (int, error) { return a, nil }, nil)
	_, err = db.NewWorker(tocsin.WorkerOptions{Concurrency: huge, Logger: quiet})
	wantCode(t, err, tocsin.ErrInvalid)
	if st := must(db.Queue("q").Stats(bg)); st.Pending+st.Scheduled != 0 {
		t.Fatal("a refused enqueue wrote a job")
	}
	env := string(must(db.Envelope("t", "[]", "{}", &tocsin.CallOptions{Timeout: 500 * time.Microsecond})))
	if !strings.Contains(env, `"timeout_ms":1`) {
		t.Fatalf("a 500µs timeout became none: %s", env)
	}
	id := must(db.Queue("q").Enqueue(bg, 1, &tocsin.EnqueueOptions{Expires: 500 * time.Microsecond}))
	if j := must(db.Job(bg, id)); j.ExpiresAt.IsZero() {
		t.Fatal("a 500µs expiry became never")
	}
	if ok := must(db.Lock("l", "o", 500*time.Microsecond).TryAcquire(bg)); !ok {
		t.Fatal("a 500µs lock ttl was refused")
	}
}
