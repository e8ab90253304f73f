package tocsin_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

// closeStressRounds is how many rounds TestCloseDuringWaitsStress runs at most (within
// its time budget); TOCSIN_CLOSE_STRESS_ROUNDS raises it for a longer hunt.
func closeStressRounds() (int, time.Duration) {
	if s := os.Getenv("TOCSIN_CLOSE_STRESS_ROUNDS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n, time.Duration(n) * time.Second
		}
	}
	if testing.Short() {
		return 10, time.Second
	}
	return 60, 3 * time.Second
}

// Close while other goroutines wait on the DB (or are just starting a wait, or are
// being cancelled by their context): every wait ends within seconds, with ErrClosed
// or normally, and nothing crashes. Each round starts a lock acquire blocked by
// another holder, a queue wait, a WaitResult, a Listen, a stream Subscribe, an Events
// loop, a worker (NewWorker + Run), a never-run worker, a wait whose context is
// cancelled around the same time, and plain calls in a loop; then Close after 0..12 ms.
func TestCloseDuringWaitsStress(t *testing.T) {
	rounds, budget := closeStressRounds()
	start := time.Now()
	n := 0
	for ; n < rounds && (n < 3 || time.Since(start) < budget); n++ {
		closeStressRound(t, n, time.Duration(rand.IntN(13))*time.Millisecond)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d rounds in %s", n, time.Since(start).Round(time.Millisecond))
}

func closeStressRound(t *testing.T, round int, delay time.Duration) {
	path := filepath.Join(t.TempDir(), fmt.Sprintf("close%d.db", round))
	db, err := tocsin.Open(path, nil)
	check(t, err)
	closed := false
	defer func() {
		if !closed {
			db.Close()
		}
	}()
	tocsin.Task(db, "stress", func(ctx context.Context, n int) (int, error) { return n, nil }, &tocsin.TaskOptions{Queue: "work"})
	holder := db.Lock("L", "holder", time.Minute)
	if ok, err := holder.TryAcquire(bg); err != nil || !ok {
		t.Fatalf("holder: %v %v", ok, err)
	}
	// a job without a result: WaitResult waits for it
	jobID := must(db.Queue("nobody").Enqueue(bg, 1, nil))

	type outcome struct {
		what string
		err  error
	}
	var wg sync.WaitGroup
	out := make(chan outcome, 32)
	run := func(what string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out <- outcome{what, f()}
		}()
	}
	run("lock acquire", func() error {
		return db.Lock("L", "waiter", time.Minute).Acquire(bg)
	})
	run("queue wait", func() error { return db.Queue("empty").Wait(bg) })
	run("result wait", func() error {
		_, err := db.WaitResult(bg, jobID)
		return err
	})
	run("listen", func() error {
		l, err := db.Listen(bg, "ch", nil)
		if err != nil {
			return err
		}
		return l.Err()
	})
	run("subscribe", func() error {
		sub, err := db.Stream("s").Subscribe(bg, "", &tocsin.SubscribeOptions{FromOffset: new(int64)})
		if err != nil {
			return err
		}
		for range sub.C {
		}
		return sub.Err()
	})
	run("events", func() error {
		for _, err := range db.Stream("s").Events(bg, "c", nil) {
			if err != nil {
				return err
			}
		}
		return nil
	})
	run("worker", func() error {
		w, err := db.NewWorker(tocsin.WorkerOptions{Logger: quiet})
		if err != nil {
			return err
		}
		return w.Run(bg)
	})
	run("unrun worker", func() error {
		_, err := db.NewWorker(tocsin.WorkerOptions{Logger: quiet})
		return err // closed with the DB
	})
	run("cancelled lock acquire", func() error {
		ctx, cancel := context.WithCancel(bg)
		time.AfterFunc(time.Duration(rand.IntN(13))*time.Millisecond, cancel)
		defer cancel()
		err := db.Lock("L", "impatient", time.Minute).Acquire(ctx)
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	})
	run("calls", func() error {
		for i := 0; ; i++ {
			if _, err := db.Queue("busy").Enqueue(bg, i, nil); err != nil {
				return err
			}
			if _, err := db.Notify(bg, "ch", i, nil); err != nil {
				return err
			}
			if _, err := db.Stream("s").Publish(bg, i, nil); err != nil {
				return err
			}
		}
	})

	time.Sleep(delay)
	closeDone := make(chan error, 1)
	go func() { closeDone <- db.Close() }()
	select {
	case err := <-closeDone:
		closed = true
		check(t, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("round %d (Close after %s): Close did not return within 10s", round, delay)
	}
	go func() { wg.Wait(); close(out) }()
	deadline := time.After(10 * time.Second)
	for got := 0; got < 10; got++ {
		select {
		case o, ok := <-out:
			if !ok {
				t.Fatalf("round %d: %d of 10 waits reported", round, got)
			}
			if o.err != nil && !errors.Is(o.err, tocsin.ErrClosed) {
				t.Errorf("round %d (Close after %s): %s ended with %v, want ErrClosed or nil", round, delay, o.what, o.err)
			}
		case <-deadline:
			t.Fatalf("round %d (Close after %s): waits still blocked 10s after Close", round, delay)
		}
	}
}

// Close returns once the waits have let go: a subscription's goroutine has closed its
// core subscription, saving the consumer's offset, before Close returns (not after: a
// program that closes and reopens reads the offset saved).
func TestCloseReturnsAfterSubscriptionSaved(t *testing.T) {
	for round := 0; round < 20; round++ {
		path := filepath.Join(t.TempDir(), "t.db")
		db, err := tocsin.Open(path, nil)
		check(t, err)
		s := db.Stream("s")
		must(s.PublishMany(bg, []any{1, 2, 3}, nil))
		sub, err := s.Subscribe(bg, "billing", nil)
		check(t, err)
		<-sub.C // event 1 handed on; the goroutine blocks handing on event 2
		check(t, db.Close())
		db2, err := tocsin.Open(path, nil)
		check(t, err)
		off, err := db2.Stream("s").Offset(bg, "billing")
		check(t, err)
		check(t, db2.Close())
		if off != 1 {
			t.Fatalf("round %d: offset %d right after Close, want 1 (saved before Close returned)", round, off)
		}
		for range sub.C {
		}
	}
}

// A call of another goroutine waiting for the write lock (here held by a transaction,
// with a 60 s busy timeout) made Close wait for that timeout; now the call ends with
// ErrClosed and Close returns. A second Close returns once the first has finished.
func TestCloseEndsAWaitForTheWriteLock(t *testing.T) {
	db, err := tocsin.Open(filepath.Join(t.TempDir(), "busy.db"), &tocsin.Options{BusyTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	bg := context.Background()
	held, release := make(chan struct{}), make(chan struct{})
	txDone := make(chan error, 1)
	go func() {
		txDone <- db.Tx(bg, func(tx *tocsin.Tx) error {
			if _, err := tx.Queue("q").Enqueue(bg, 1, nil); err != nil {
				return err
			}
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	started, got := make(chan struct{}), make(chan error, 1)
	go func() {
		close(started)
		_, err := db.Queue("q").Enqueue(bg, 2, nil)
		got <- err
	}()
	<-started
	time.Sleep(100 * time.Millisecond) // into its lock wait (if not, it meets the closed DB: the same)
	closed := make(chan error, 2)
	go func() { closed <- db.Close() }()
	go func() { closed <- db.Close() }()
	select {
	case err := <-got:
		if !errors.Is(err, tocsin.ErrClosed) {
			t.Fatalf("the waiting enqueue: %v, want ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the enqueue waiting for the lock did not end with Close")
	}
	for i := 0; i < 2; i++ {
		if err := <-closed; err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	close(release)
	if err := <-txDone; err != nil {
		t.Fatalf("the transaction begun before Close: %v", err)
	}
}
