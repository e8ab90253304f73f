package tocsin_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

// A Close by the user ends a Listener or a Subscription with ErrClosed (as calls after
// DB.Close end), not with the "context canceled" of the context Close cancels inside;
// Close itself returns nil.
func TestCloseReportsErrClosed(t *testing.T) {
	db := openDB(t)
	l := must(db.Listen(bg, "c", nil))
	check(t, l.Close())
	if _, ok := <-l.C; ok {
		t.Fatal("C not closed")
	}
	wantCode(t, l.Err(), tocsin.ErrClosed)
	if errors.Is(l.Err(), context.Canceled) || errors.Is(l.Err(), tocsin.ErrInterrupted) {
		t.Fatal("a Close reported as a cancelled context:", l.Err())
	}
	check(t, l.Close()) // again: the same
	wantCode(t, l.Err(), tocsin.ErrClosed)

	s := db.Stream("s")
	must(s.Publish(bg, 1, nil))
	sub := must(s.Subscribe(bg, "c", nil))
	<-sub.C
	check(t, sub.Close())
	wantCode(t, sub.Err(), tocsin.ErrClosed)
	if errors.Is(sub.Err(), context.Canceled) {
		t.Fatal(sub.Err())
	}
	if v := must(s.Offset(bg, "c")); v != 1 {
		t.Fatal("the close did not save", v)
	}

	// ended by its own context first: Err stays the context's, Close after it is nil
	ctx, cancel := context.WithCancel(bg)
	l = must(db.Listen(ctx, "c", nil))
	cancel()
	for range l.C {
	}
	check(t, l.Close())
	if !errors.Is(l.Err(), context.Canceled) {
		t.Fatal(l.Err())
	}
	// ended by DB.Close: ErrClosed, which Close returns (as before)
	db2 := openDB2(t, db.Path())
	l = must(db2.Listen(bg, "c", nil))
	check(t, db2.Close())
	wantCode(t, l.Close(), tocsin.ErrClosed)
	wantCode(t, l.Err(), tocsin.ErrClosed)
}

// freezeOffsets makes every save of a consumer's offset fail (a trigger of the
// application's on the core's table): the failure a full disk or a lock held past the
// busy timeout would be.
func freezeOffsets(t *testing.T, db *tocsin.DB) {
	t.Helper()
	check(t, db.Exec(bg, `
		CREATE TRIGGER freeze_ins BEFORE INSERT ON _tocsin_offsets BEGIN SELECT RAISE(ABORT, 'offsets are frozen'); END;
		CREATE TRIGGER freeze_upd BEFORE UPDATE ON _tocsin_offsets BEGIN SELECT RAISE(ABORT, 'offsets are frozen'); END;`))
}

func thaw(t *testing.T, db *tocsin.DB) {
	t.Helper()
	check(t, db.Exec(bg, `DROP TRIGGER freeze_ins; DROP TRIGGER freeze_upd;`))
}

func frozen(err error) bool { return err != nil && strings.Contains(err.Error(), "offsets are frozen") }

// The save of the consumer's offset at the end of an Events loop can fail: the events
// come again (nothing is lost), and the failure is reported -- in the last pair when
// the iteration ends with an error (here its context), by Consumer.Err after a break.
func TestEventsReportsAFailedFinalSave(t *testing.T) {
	db := openDB(t)
	s := db.Stream("s")
	must(s.PublishMany(bg, []any{"a", "b", "c"}, nil))
	freezeOffsets(t, db)

	// a break: no pair can carry it, Consumer.Err does
	c := s.Consumer(bg, "billing", nil)
	n := 0
	for _, err := range c.Events() {
		check(t, err)
		if n++; n == 2 {
			break
		}
	}
	if !frozen(c.Err()) {
		t.Fatal("the failed save after a break was not reported:", c.Err())
	}
	if v := must(s.Offset(bg, "billing")); v != 0 {
		t.Fatal(v)
	}

	// the context ends the loop: the last pair carries both
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	var last error
	n = 0
	for ev, err := range s.Events(ctx, "billing", nil) {
		if err != nil {
			last = err
			break
		}
		if ev.ID == 1 { // the events come again
			n++
		}
		if ev.ID == 3 {
			cancel()
		}
	}
	if n != 1 || !errors.Is(last, context.Canceled) || !frozen(last) {
		t.Fatal("want the context's error joined with the failed save:", n, last)
	}

	// once saves work again, a break reports nil and the offset is saved
	thaw(t, db)
	c = s.Consumer(bg, "billing", nil)
	for _, err := range c.Events() {
		check(t, err)
		break
	}
	check(t, c.Err())
	if v := must(s.Offset(bg, "billing")); v != 1 {
		t.Fatal(v)
	}
}

// A channel Subscription whose save at Close fails reports it (Close and Err); so does
// the save of the processed events that NoSaveOnClose with autosave makes there.
func TestSubscriptionReportsAFailedFinalSave(t *testing.T) {
	db := openDB(t)
	s := db.Stream("s")
	must(s.PublishMany(bg, []any{"a", "b", "c"}, nil))
	freezeOffsets(t, db)
	for _, opts := range []*tocsin.SubscribeOptions{nil, {AutosaveEvery: 100, NoSaveOnClose: true}} {
		sub := must(s.Subscribe(bg, "c", opts))
		<-sub.C
		<-sub.C
		<-sub.C // the second counts as processed
		if err := sub.Close(); !frozen(err) {
			t.Fatalf("%+v: Close: want the failed save, got %v", opts, err)
		}
		if err := sub.Err(); !frozen(err) || !errors.Is(err, tocsin.ErrClosed) {
			t.Fatalf("%+v: Err: want ErrClosed and the failed save, got %v", opts, err)
		}
		if v := must(s.Offset(bg, "c")); v != 0 {
			t.Fatal(v)
		}
	}
}

// ListenOptions.BufferSize bounds what waits for a slow reader: besides the one
// notification offered on C, the newest BufferSize. The listener's goroutine held a
// whole batch (up to BufferSize) beyond the core's bound while the reader was slow.
func TestListenBufferSizeBoundsTheBatchInHand(t *testing.T) {
	db := openDB(t)
	l := must(db.Listen(bg, "c", &tocsin.ListenOptions{BufferSize: 2}))
	defer l.Close()
	check(t, db.Tx(bg, func(tx *tocsin.Tx) error { // one batch of two
		for i := 1; i <= 2; i++ {
			if _, err := tx.Notify(bg, "c", i, nil); err != nil {
				return err
			}
		}
		return nil
	}))
	time.Sleep(100 * time.Millisecond) // the goroutine reads them and offers the first on C
	for i := 3; i <= 8; i++ {
		must(db.Notify(bg, "c", i, nil))
	}
	var got []string
	for {
		select {
		case m := <-l.C:
			got = append(got, string(m.Payload))
			continue
		case <-time.After(300 * time.Millisecond):
		}
		break
	}
	if strings.Join(got, " ") != "1 7 8" || l.Dropped() != 5 {
		t.Fatalf("want 1 (offered), then the newest 2: 7 8, 5 dropped; got %v, %d dropped", got, l.Dropped())
	}
}
