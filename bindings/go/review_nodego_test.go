package tocsin

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// cancelledAfterFirstLook is a context that is live when a call first looks at it and
// cancelled from then on: as a ctx cancelled while the call waits for the write lock.
type cancelledAfterFirstLook struct {
	context.Context
	looks atomic.Int32
}

func (c *cancelledAfterFirstLook) Err() error {
	if c.looks.Add(1) == 1 {
		return nil
	}
	return context.Canceled
}

// lockWaiters opens db (with busy) and holder on one new file, and returns the calls
// on db that wait for the write lock when holder holds it (holdLock).
func lockWaiters(t *testing.T, busy time.Duration) (db, holder *DB, calls map[string]func(context.Context) error) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "a.db")
	db, err := Open(f, &Options{BusyTimeout: busy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if holder, err = Open(f, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close() })
	calls = map[string]func(ctx context.Context) error{
		"enqueue": func(ctx context.Context) error { _, err := db.Queue("q").Enqueue(ctx, 1, nil); return err },
		"exec":    func(ctx context.Context) error { return db.Exec(ctx, "CREATE TABLE t(a)") },
		"tx":      func(ctx context.Context) error { return db.Tx(ctx, func(tx *Tx) error { return nil }) },
		"claim":   func(ctx context.Context) error { _, err := db.Queue("q").Claim(ctx, "w", 1, 0); return err },
	}
	return db, holder, calls
}

// holdLock makes holder hold the write lock (an open Tx) until release, which
// returns once that Tx has ended.
func holdLock(t *testing.T, holder *DB) (release func()) {
	t.Helper()
	held, free, done := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		done <- holder.Tx(context.Background(), func(tx *Tx) error { close(held); <-free; return nil })
	}()
	<-held
	return func() {
		close(free)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// A call whose ctx was cancelled while it waited for another connection's write lock
// returned a bare ErrBusy at the busy timeout, as if nobody had cancelled it: it now
// also matches ErrInterrupted and context.Canceled (as a wait the context ended does),
// and nothing is written.
func TestCancelledWhileWaitingForTheLockSaysSo(t *testing.T) {
	db, holder, calls := lockWaiters(t, 200*time.Millisecond)
	ctx := context.Background()
	release := holdLock(t, holder)
	for name, f := range calls {
		err := f(&cancelledAfterFirstLook{Context: ctx})
		if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrInterrupted) || !errors.Is(err, ErrBusy) {
			t.Errorf("%s: want context.Canceled, ErrInterrupted and ErrBusy, got %v", name, err)
		}
	}
	release()
	st, err := db.Queue("q").Stats(ctx)
	if err != nil || st.Pending != 0 {
		t.Fatalf("nothing may be written: %+v %v", st, err)
	}
	// a ctx never cancelled: ErrBusy alone, as before
	release = holdLock(t, holder)
	_, err = db.Queue("q").Enqueue(ctx, 1, nil)
	release()
	if !errors.Is(err, ErrBusy) || errors.Is(err, context.Canceled) || errors.Is(err, ErrInterrupted) {
		t.Fatalf("want ErrBusy alone, got %v", err)
	}
}

// A cancel of the ctx ends a call's wait for another connection's write lock at once
// (the core's cancel token), long before the busy timeout: ErrInterrupted and
// context.Canceled, not ErrBusy, nothing written; a deadline that passes meanwhile
// is ErrTimeout and context.DeadlineExceeded.
func TestCancelEndsTheLockWait(t *testing.T) {
	// (a broken cancel would hang the test, not pass it)
	db, holder, calls := lockWaiters(t, 10*time.Minute)
	release := holdLock(t, holder)
	for name, call := range calls {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(20*time.Millisecond, cancel)
		err := call(ctx)
		if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrInterrupted) || errors.Is(err, ErrBusy) {
			t.Errorf("%s: want context.Canceled and ErrInterrupted, got %v", name, err)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
		err = call(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrTimeout) {
			t.Errorf("%s with a deadline: want context.DeadlineExceeded and ErrTimeout, got %v", name, err)
		}
	}
	release()
	st, err := db.Queue("q").Stats(context.Background())
	if err != nil || st.Pending != 0 {
		t.Fatalf("nothing may be written: %+v %v", st, err)
	}
	// the same ctx, live, once the lock is free: the call runs
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := db.Queue("q").Enqueue(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
}

// The README's advice on integers beyond 2^53 written by another runtime: an int64
// field or json.Number reads them exactly, the RawMessage passes them on unchanged,
// and `any` is encoding/json's float64 (rounded), as documented.
func TestBigIntegersFromAnotherRuntimeDecodeExactlyIntoInt64(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "a.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	// as the SQL extension, Python or Node writes it
	if err := db.Exec(ctx, `SELECT tocsin_enqueue('big', '{"n":9007199254740993}')`); err != nil {
		t.Fatal(err)
	}
	j, err := db.Queue("big").ClaimOne(ctx, "w", 0)
	if err != nil || j == nil {
		t.Fatal(j, err)
	}
	var exact struct{ N int64 }
	if err := j.Decode(&exact); err != nil || exact.N != 9007199254740993 {
		t.Fatalf("int64 field: %v %v", exact.N, err)
	}
	var num struct{ N json.Number }
	if err := j.Decode(&num); err != nil || num.N.String() != "9007199254740993" {
		t.Fatalf("json.Number: %v %v", num.N, err)
	}
	if string(j.Payload) != `{"n":9007199254740993}` {
		t.Fatalf("payload: %s", j.Payload)
	}
	var loose map[string]any
	if err := j.Decode(&loose); err != nil || loose["n"] != float64(9007199254740992) {
		t.Fatalf("any: %v %v", loose["n"], err)
	}
}
