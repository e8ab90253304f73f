package tocsin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func openDB(t testing.TB) *tocsin.DB {
	t.Helper()
	db, err := tocsin.Open(filepath.Join(t.TempDir(), "t.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func openDB2(t *testing.T, path string) *tocsin.DB {
	db, err := tocsin.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

var bg = context.Background()

// must panics on an error (the test fails with the stack of the call).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantCode(t *testing.T, err error, code tocsin.Code) {
	t.Helper()
	if !errors.Is(err, code) {
		t.Fatalf("want %v, got %v", code, err)
	}
	var te *tocsin.Error
	if !errors.As(err, &te) {
		t.Fatalf("want *tocsin.Error, got %T", err)
	}
}

func TestVersions(t *testing.T) {
	if tocsin.Version() == "" || tocsin.VersionNumber() < 1000 {
		t.Fatal(tocsin.Version(), tocsin.VersionNumber())
	}
	info := tocsin.SQLite()
	if info.Version < "3.37" || info.SourceID == "" {
		t.Fatal(info)
	}
}

func TestOpenBadInput(t *testing.T) {
	_, err := tocsin.Open(filepath.Join(t.TempDir(), "no", "such", "dir", "x.db"), nil)
	wantCode(t, err, tocsin.ErrCantOpen)
	_, err = tocsin.Open("a\x00b", nil)
	wantCode(t, err, tocsin.ErrInvalid)
	_, err = tocsin.Open(filepath.Join(t.TempDir(), "x.db"), &tocsin.Options{BusyTimeout: -1})
	wantCode(t, err, tocsin.ErrInvalid)
}

func TestCloseTwiceAndUseAfterClose(t *testing.T) {
	db := openDB(t)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := db.Queue("q").Enqueue(bg, 1, nil)
	wantCode(t, err, tocsin.ErrClosed)
}

func TestQueueLifecycle(t *testing.T) {
	db := openDB(t)
	q := db.Queue("emails")
	type email struct {
		To string `json:"to"`
	}
	id := must(q.Enqueue(bg, email{"ann@example.com"}, &tocsin.EnqueueOptions{Priority: 5, Meta: map[string]string{"trace": "t1"}}))
	id2 := must(q.Enqueue(bg, json.RawMessage(`{"to":"bob@example.com"}`), nil))
	jobs := must(q.Claim(bg, "w1", 10, time.Minute))
	if len(jobs) != 2 || jobs[0].ID != id || jobs[1].ID != id2 {
		t.Fatalf("priority order: %+v", jobs)
	}
	var e email
	if err := jobs[0].Decode(&e); err != nil || e.To != "ann@example.com" {
		t.Fatal(err, e)
	}
	if string(jobs[0].Meta) != `{"trace":"t1"}` || jobs[0].State != "processing" || jobs[0].Attempts != 1 {
		t.Fatalf("%+v", jobs[0])
	}
	if err := q.Ack(bg, &jobs[0]); err != nil {
		t.Fatal(err)
	}
	// acked: gone; a second ack is a stale holder
	wantCode(t, q.Ack(bg, &jobs[0]), tocsin.ErrLeaseLost)
	_, err := q.Get(bg, id)
	wantCode(t, err, tocsin.ErrNotFound)
	if err := q.Heartbeat(bg, &jobs[1], time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := q.Fail(bg, &jobs[1], "boom"); err != nil {
		t.Fatal(err)
	}
	dead := must(q.DeadLetters(bg, 0, 0))
	if len(dead) != 1 || dead[0].Reason != "failed" || dead[0].LastError != "boom" {
		t.Fatalf("%+v", dead)
	}
	check(t, q.Requeue(bg, id2))
	wantCode(t, q.Requeue(bg, id2), tocsin.ErrNotFound)
	j := must(q.Get(bg, id2))
	if j.State != "pending" {
		t.Fatal(j.State)
	}
	check(t, q.Cancel(bg, id2))
	wantCode(t, q.Cancel(bg, id2), tocsin.ErrNotFound)
	if n := must(q.Purge(bg, time.Time{})); n != 1 {
		t.Fatal(n)
	}
}

func TestRetryUniquePauseStats(t *testing.T) {
	db := openDB(t)
	q := db.Queue("q")
	a := must(q.Enqueue(bg, 1, &tocsin.EnqueueOptions{UniqueKey: "k", MaxAttempts: 2}))
	b := must(q.Enqueue(bg, 2, &tocsin.EnqueueOptions{UniqueKey: "k"}))
	if a != b {
		t.Fatal("unique key did not dedup", a, b)
	}
	j := must(q.ClaimOne(bg, "w", 0))
	if err := q.Retry(bg, j, 0, "again"); err != nil {
		t.Fatal(err)
	}
	j = must(q.ClaimOne(bg, "w", 0))
	if j.Attempts != 2 {
		t.Fatal(j.Attempts)
	}
	if err := q.Retry(bg, j, 0, "spent"); err != nil {
		t.Fatal(err)
	}
	got := must(q.Get(bg, a))
	if got.State != "dead" || got.Reason != "max_attempts" {
		t.Fatalf("%+v", got)
	}
	check(t, q.Pause(bg))
	if !must(q.Paused(bg)) {
		t.Fatal("not paused")
	}
	must(q.Enqueue(bg, 3, nil))
	if jobs := must(q.Claim(bg, "w", 5, 0)); len(jobs) != 0 {
		t.Fatal("paused queue handed out a job")
	}
	st := must(q.Stats(bg))
	if st.Pending != 1 || st.Dead != 1 || !st.Paused || st.Queue != "q" {
		t.Fatalf("%+v", st)
	}
	check(t, q.Resume(bg))
	if _, ok, _ := q.NextDeadline(bg); !ok {
		t.Fatal("a pending job has a deadline")
	}
	all := must(db.Stats(bg))
	if len(all) != 1 {
		t.Fatalf("%+v", all)
	}
}

func TestEnqueueManyAtomic(t *testing.T) {
	db := openDB(t)
	q := db.Queue("q")
	ids := must(q.EnqueueMany(bg, []tocsin.JobSpec{{Payload: 1}, {Queue: "other", Payload: 2}}))
	if len(ids) != 2 || ids[1] <= ids[0] {
		t.Fatal(ids)
	}
	_, err := q.EnqueueMany(bg, []tocsin.JobSpec{{Payload: 3}, {Payload: json.RawMessage("{bad")}})
	wantCode(t, err, tocsin.ErrInvalid)
	if st := must(q.Stats(bg)); st.Pending != 1 {
		t.Fatalf("half applied: %+v", st)
	}
}

func TestBadInputWritesNothing(t *testing.T) {
	db := openDB(t)
	q := db.Queue("q")
	cases := []error{
		func() error { _, err := db.Queue("").Enqueue(bg, 1, nil); return err }(),
		func() error { _, err := db.Queue("a\x01b").Enqueue(bg, 1, nil); return err }(),
		func() error { _, err := q.Enqueue(bg, json.RawMessage("{nope"), nil); return err }(),
		func() error { _, err := q.Enqueue(bg, 1, &tocsin.EnqueueOptions{MaxAttempts: -1}); return err }(),
		func() error { _, err := q.Enqueue(bg, 1, &tocsin.EnqueueOptions{Delay: -time.Second}); return err }(),
		func() error { _, err := q.Enqueue(bg, 1, &tocsin.EnqueueOptions{Meta: []int{1}}); return err }(),
		func() error { _, err := q.Enqueue(bg, make(chan int), nil); return err }(),
		func() error { _, err := q.Claim(bg, "", 1, 0); return err }(),
		func() error { _, err := q.Claim(bg, "w", -1, 0); return err }(),
		func() error { _, err := db.Stream("").Publish(bg, 1, nil); return err }(),
		func() error { _, err := db.Notify(bg, "", 1, nil); return err }(),
		func() error { _, err := db.SetSchedule(bg, "s", "61 * * * *", "q", 1, nil); return err }(),
		func() error { _, err := db.RateLimit("r", 0, time.Second).Try(bg); return err }(),
		func() error { _, err := db.Lock("l", "", time.Second).TryAcquire(bg); return err }(),
		func() error { _, err := db.Call(bg, "q", "", nil, nil, nil); return err }(),
	}
	for i, err := range cases {
		if !errors.Is(err, tocsin.ErrInvalid) {
			t.Errorf("case %d: want ErrInvalid, got %v", i, err)
		}
	}
	if st := must(db.Stats(bg)); len(st) != 0 {
		t.Fatalf("bad input wrote: %+v", st)
	}
	big, err := tocsin.Open(filepath.Join(t.TempDir(), "b.db"), &tocsin.Options{MaxPayloadBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	_, err = big.Queue("q").Enqueue(bg, "0123456789abcdef", nil)
	wantCode(t, err, tocsin.ErrTooBig)
}

func TestTxCommitRollbackPanic(t *testing.T) {
	db := openDB(t)
	check(t, db.Exec(bg, "CREATE TABLE orders(id INTEGER PRIMARY KEY, total INTEGER)"))
	boom := errors.New("boom")
	err := db.Tx(bg, func(tx *tocsin.Tx) error {
		if err := tx.Exec(bg, "INSERT INTO orders(total) VALUES (1)"); err != nil {
			return err
		}
		if _, err := tx.Queue("q").Enqueue(bg, 1, nil); err != nil {
			return err
		}
		if _, err := tx.Notify(bg, "c", 1, nil); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if st := must(db.Stats(bg)); len(st) != 0 {
		t.Fatalf("rollback kept the job: %+v", st)
	}
	if n := must(db.NotifyMaxID(bg)); n != 0 {
		t.Fatal("rollback kept the notification")
	}
	func() {
		defer func() { recover() }()
		_ = db.Tx(bg, func(tx *tocsin.Tx) error {
			tx.Queue("q").Enqueue(bg, 1, nil)
			panic("x")
		})
	}()
	if st := must(db.Stats(bg)); len(st) != 0 {
		t.Fatal("panic kept the job")
	}
	var saved *tocsin.Tx
	err = db.Tx(bg, func(tx *tocsin.Tx) error {
		saved = tx
		if err := tx.Exec(bg, "INSERT INTO orders(total) VALUES (2)"); err != nil {
			return err
		}
		_, err := tx.Queue("q").Enqueue(bg, 2, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := must(db.Queue("q").Stats(bg)); st.Pending != 1 {
		t.Fatal("commit lost the job")
	}
	_, err = saved.Queue("q").Enqueue(bg, 3, nil)
	wantCode(t, err, tocsin.ErrClosed)
	// waits refuse inside a transaction
	_ = db.Tx(bg, func(tx *tocsin.Tx) error {
		wantCode(t, tx.Queue("q").Wait(bg), tocsin.ErrInvalid)
		return nil
	})
}

func TestAckInTxAndFencing(t *testing.T) {
	db := openDB(t)
	q := db.Queue("q")
	must(q.Enqueue(bg, 1, nil))
	t0 := time.Now()
	check(t, db.SetTime(t0))
	j := must(q.ClaimOne(bg, "w1", time.Second))
	check(t, db.SetTime(t0.Add(2*time.Second))) // the lease lapses; w2 reclaims it
	j2 := must(q.ClaimOne(bg, "w2", time.Minute))
	if j2.ID != j.ID || j2.Token == j.Token {
		t.Fatalf("%+v %+v", j, j2)
	}
	wantCode(t, q.Ack(bg, j), tocsin.ErrLeaseLost)
	wantCode(t, q.Retry(bg, j, 0, ""), tocsin.ErrLeaseLost)
	wantCode(t, q.Heartbeat(bg, j, time.Second), tocsin.ErrLeaseLost)
	wantCode(t, q.Fail(bg, j, ""), tocsin.ErrLeaseLost)
	if got := db.Now(); !got.Equal(time.UnixMilli(t0.Add(2 * time.Second).UnixMilli())) {
		t.Fatal("clock", got)
	}
	// the holder acks inside a transaction that rolls back: still leased
	_ = db.Tx(bg, func(tx *tocsin.Tx) error {
		if err := tx.Ack(bg, j2.ID, j2.Token); err != nil {
			t.Fatal(err)
		}
		return errors.New("rollback")
	})
	if got := must(q.Get(bg, j2.ID)); got.State != "processing" {
		t.Fatal(got.State)
	}
	if err := db.Tx(bg, func(tx *tocsin.Tx) error { return tx.Complete(bg, j2.ID, j2.Token, "done", 0) }); err != nil {
		t.Fatal(err)
	}
	var s string
	if err := must(db.Result(bg, j2.ID)).Decode(&s); err != nil || s != "done" {
		t.Fatal(err, s)
	}
}

func TestStreams(t *testing.T) {
	db := openDB(t)
	s := db.Stream("orders")
	o1 := must(s.Publish(bg, map[string]int{"id": 1}, &tocsin.PublishOptions{Key: "k1", Meta: map[string]string{"m": "1"}}))
	offs := must(s.PublishMany(bg, []any{2, 3}, nil))
	if len(offs) != 2 || offs[0] <= o1 {
		t.Fatal(offs)
	}
	evs := must(s.Read(bg, 0, 10))
	if len(evs) != 3 || evs[0].Key != "k1" || string(evs[0].Meta) != `{"m":"1"}` {
		t.Fatalf("%+v", evs)
	}
	if v := must(s.SaveOffset(bg, "c", offs[0])); v != offs[0] {
		t.Fatal(v)
	}
	if v := must(s.SaveOffset(bg, "c", o1)); v != offs[0] {
		t.Fatal("offsets move forward only", v)
	}
	if v := must(s.Offset(bg, "c")); v != offs[0] {
		t.Fatal(v)
	}
	// iterator: replay from the saved offset, then live
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	var got []int64
	go func() {
		time.Sleep(20 * time.Millisecond)
		s.Publish(bg, 4, nil)
	}()
	for ev, err := range s.Events(ctx, "c", &tocsin.SubscribeOptions{AutosaveEvery: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.ID)
		if len(got) == 2 {
			break
		}
	}
	if len(got) != 2 || got[0] != offs[1] {
		t.Fatal(got)
	}
	if v := must(s.Offset(bg, "c")); v != got[1] {
		t.Fatal("autosave did not save the position", v, got)
	}
	// channel form
	from := int64(0)
	sub := must(s.Subscribe(ctx, "", &tocsin.SubscribeOptions{FromOffset: &from}))
	for i := 0; i < 4; i++ {
		select {
		case m := <-sub.C:
			if i == 0 && m.ID != o1 {
				t.Fatal(m.ID)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no event")
		}
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if n := must(s.Trim(bg, tocsin.TrimOptions{MaxCount: 1})); n != 3 {
		t.Fatal(n)
	}
	_, err := s.PublishMany(bg, []any{1}, []string{"a", "b"})
	wantCode(t, err, tocsin.ErrInvalid)
}

// A named consumer's offset is saved when the subscription ends (a break out of Events,
// Close of a Subscription): a new subscription resumes after the last event seen.
// NoSaveOnClose leaves the offset where it was.
func TestStreamSaveOnClose(t *testing.T) {
	db := openDB(t)
	s := db.Stream("soc")
	offs := must(s.PublishMany(bg, []any{1, 2, 3, 4, 5, 6}, nil))
	n := 0
	for ev, err := range s.Events(bg, "c", &tocsin.SubscribeOptions{Batch: 10}) {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 2 { // mid-batch: 3..6 were read, not handed on
			if ev.ID != offs[1] {
				t.Fatal(ev.ID)
			}
			break
		}
	}
	if v := must(s.Offset(bg, "c")); v != offs[1] {
		t.Fatal("the break did not save the last event seen", v, offs)
	}
	// a new subscription resumes after it; Close saves the last event delivered on C
	sub := must(s.Subscribe(bg, "c", nil))
	m := <-sub.C
	if m.ID != offs[2] {
		t.Fatal("did not resume after the saved offset", m.ID, offs)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if v := must(s.Offset(bg, "c")); v != offs[2] {
		t.Fatal("Close did not save the last event delivered", v, offs)
	}
	// the opt-out, in both forms
	for ev, err := range s.Events(bg, "c", &tocsin.SubscribeOptions{NoSaveOnClose: true}) {
		if err != nil || ev.ID != offs[3] {
			t.Fatal(ev.ID, err)
		}
		break
	}
	sub = must(s.Subscribe(bg, "c", &tocsin.SubscribeOptions{NoSaveOnClose: true}))
	if m := <-sub.C; m.ID != offs[3] {
		t.Fatal(m.ID)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if v := must(s.Offset(bg, "c")); v != offs[2] {
		t.Fatal("NoSaveOnClose moved the offset", v, offs)
	}
}

func TestListenAndCancel(t *testing.T) {
	db := openDB(t)
	ctx, cancel := context.WithCancel(bg)
	l := must(db.Listen(ctx, "orders", nil))
	must(db.Notify(bg, "orders", map[string]int{"id": 1}, map[string]string{"src": "web"}))
	must(db.Notify(bg, "other", 1, nil))
	select {
	case m := <-l.C:
		if string(m.Payload) != `{"id":1}` || m.Name != "orders" || string(m.Meta) != `{"src":"web"}` {
			t.Fatalf("%+v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no notification")
	}
	cancel()
	if _, ok := <-l.C; ok {
		t.Fatal("channel not closed after cancel")
	}
	if !errors.Is(l.Err(), context.Canceled) || !errors.Is(l.Err(), tocsin.ErrInterrupted) {
		t.Fatal(l.Err())
	}
	l.Close()
	ns := must(db.Notifications(bg, "orders", 0, 0))
	if len(ns) != 1 {
		t.Fatal(ns)
	}
	if n := must(db.PruneNotifications(bg, 0, 1)); n != 0 {
		t.Fatal(n)
	}
	check(t, db.SetNotifyAutotrim(bg, 0, 10, 1))
}

func TestWaitsEndWithContext(t *testing.T) {
	db := openDB(t)
	q := db.Queue("idle")
	lk := db.Lock("l", "other", time.Hour)
	if !must(lk.TryAcquire(bg)) {
		t.Fatal("lock")
	}
	id := must(q.Enqueue(bg, 1, &tocsin.EnqueueOptions{Delay: time.Hour}))
	waits := map[string]func(ctx context.Context) error{
		"queue":  func(ctx context.Context) error { return db.Queue("empty").Wait(ctx) },
		"result": func(ctx context.Context) error { _, err := db.WaitResult(ctx, id); return err },
		"lock":   func(ctx context.Context) error { return db.Lock("l", "me", time.Second).Acquire(ctx) },
		"listen": func(ctx context.Context) error {
			l, err := db.Listen(ctx, "c", nil)
			if err != nil {
				return err
			}
			for range l.C {
			}
			return l.Err()
		},
		"stream": func(ctx context.Context) error {
			for _, err := range db.Stream("s").Events(ctx, "c", nil) {
				if err != nil {
					return err
				}
			}
			return nil
		},
		"subscribe": func(ctx context.Context) error {
			s, err := db.Stream("s").Subscribe(ctx, "c2", nil)
			if err != nil {
				return err
			}
			for range s.C {
			}
			return s.Err()
		},
	}
	for name, wait := range waits {
		t.Run(name+"/cancel", func(t *testing.T) {
			ctx, cancel := context.WithCancel(bg)
			done := make(chan error, 1)
			go func() { done <- wait(ctx) }()
			time.Sleep(30 * time.Millisecond)
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) || !errors.Is(err, tocsin.ErrInterrupted) {
					t.Fatalf("want Canceled+ErrInterrupted, got %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the wait did not end with its context")
			}
		})
		t.Run(name+"/deadline", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(bg, 30*time.Millisecond)
			defer cancel()
			err := wait(ctx)
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, tocsin.ErrTimeout) {
				t.Fatalf("want DeadlineExceeded+ErrTimeout, got %v", err)
			}
		})
		t.Run(name+"/close", func(t *testing.T) {
			db2 := must(tocsin.Open(db.Path(), nil))
			done := make(chan error, 1)
			go func() {
				// the same wait, on db2
				switch name {
				case "queue":
					done <- db2.Queue("empty").Wait(bg)
				case "result":
					_, err := db2.WaitResult(bg, id)
					done <- err
				case "lock":
					done <- db2.Lock("l", "me", time.Second).Acquire(bg)
				case "listen":
					l, err := db2.Listen(bg, "c", nil)
					if err == nil {
						for range l.C {
						}
						err = l.Err()
					}
					done <- err
				case "stream":
					var last error
					for _, err := range db2.Stream("s").Events(bg, "c", nil) {
						last = err
					}
					done <- last
				case "subscribe":
					s, err := db2.Stream("s").Subscribe(bg, "c3", nil)
					if err == nil {
						for range s.C {
						}
						err = s.Err()
					}
					done <- err
				}
			}()
			time.Sleep(30 * time.Millisecond)
			db2.Close()
			select {
			case err := <-done:
				if !errors.Is(err, tocsin.ErrClosed) {
					t.Fatalf("want ErrClosed, got %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Close did not end the wait")
			}
		})
	}
}

func TestWaitsSucceed(t *testing.T) {
	db := openDB(t)
	q := db.Queue("q")
	done := make(chan error, 1)
	go func() { done <- q.Wait(bg) }()
	time.Sleep(20 * time.Millisecond)
	id := must(q.Enqueue(bg, 1, nil))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rdone := make(chan *tocsin.Result, 1)
	go func() { r, _ := db.WaitResult(bg, id); rdone <- r }()
	j := must(q.ClaimOne(bg, "w", 0))
	check(t, q.Ack(bg, j))
	if r := <-rdone; r != nil {
		t.Fatal("acked without a result must not give a result")
	}
	l1 := db.Lock("L", "a", time.Hour)
	if !must(l1.TryAcquire(bg)) || l1.Token() == 0 {
		t.Fatal("acquire")
	}
	l2 := db.Lock("L", "b", time.Hour)
	if must(l2.TryAcquire(bg)) {
		t.Fatal("two holders")
	}
	ldone := make(chan error, 1)
	go func() { ldone <- l2.Acquire(bg) }()
	time.Sleep(20 * time.Millisecond)
	check(t, l1.Release(bg))
	if err := <-ldone; err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= 1 {
		t.Fatal("fencing token did not grow", l2.Token())
	}
	owner, tok, _, err := db.LockHolder(bg, "L")
	check(t, err)
	if owner != "b" || tok != l2.Token() {
		t.Fatal(owner, tok)
	}
	wantCode(t, l1.Renew(bg), tocsin.ErrLeaseLost)
	check(t, l2.Renew(bg))
}

func TestResultsRateLimitsSchedulesPrune(t *testing.T) {
	db := openDB(t)
	check(t, db.SaveResult(bg, 7, map[string]int{"n": 1}, time.Hour))
	r := must(db.Result(bg, 7))
	if string(r.Value) != `{"n":1}` || r.ExpiresAt.IsZero() {
		t.Fatalf("%+v", r)
	}
	check(t, db.SaveError(bg, 8, "ValueError", "bad", 0))
	r = must(db.Result(bg, 8))
	var te *tocsin.TaskError
	if err := r.Decode(new(int)); !errors.As(err, &te) || te.Type != "ValueError" || te.Message != "bad" {
		t.Fatal(err)
	}
	check(t, db.DeleteResult(bg, 8))
	wantCode(t, db.DeleteResult(bg, 8), tocsin.ErrNotFound)
	_, err := db.Result(bg, 8)
	wantCode(t, err, tocsin.ErrNotFound)

	rl := db.RateLimit("api", 2, time.Hour)
	for i, want := range []bool{true, true, false} {
		d := must(rl.Try(bg))
		if d.Allowed != want {
			t.Fatalf("call %d: %+v", i, d)
		}
		if !want && d.RetryAfter <= 0 {
			t.Fatal("no retry-after")
		}
	}
	if n := must(rl.Reset(bg)); n != 2 {
		t.Fatal(n)
	}

	next := must(db.SetSchedule(bg, "nightly", "0 3 * * *", "q", map[string]int{"a": 1}, &tocsin.ScheduleOptions{Priority: 2}))
	if next.Before(time.Now()) {
		t.Fatal(next)
	}
	s := must(db.GetSchedule(bg, "nightly"))
	if s.Cron != "0 3 * * *" || s.Priority != 2 || s.Queue != "q" {
		t.Fatalf("%+v", s)
	}
	check(t, db.PauseSchedule(bg, "nightly"))
	if s := must(db.Schedules(bg)); len(s) != 1 || !s[0].Paused {
		t.Fatalf("%+v", s)
	}
	check(t, db.ResumeSchedule(bg, "nightly"))
	if n := must(db.SchedulerTick(bg)); n != 0 {
		t.Fatal("fired early", n)
	}
	if _, ok, _ := db.SchedulerNextFire(bg); !ok {
		t.Fatal("no next fire")
	}
	check(t, db.RemoveSchedule(bg, "nightly"))
	wantCode(t, db.RemoveSchedule(bg, "nightly"), tocsin.ErrNotFound)
	wantCode(t, db.PauseSchedule(bg, "nightly"), tocsin.ErrNotFound)
	_, err = db.GetSchedule(bg, "nightly")
	wantCode(t, err, tocsin.ErrNotFound)

	n, ok, err := tocsin.CronNext("*/15 * * * *", time.UnixMilli(0), false)
	if err != nil || !ok || n.UnixMilli() != 15*60*1000 {
		t.Fatal(n, ok, err)
	}
	_, _, err = tocsin.CronNext("61 * * * *", time.Now(), false)
	wantCode(t, err, tocsin.ErrInvalid)
	p := must(db.Prune(bg, tocsin.PruneOptions{NotificationsMaxKeep: 1}))
	_ = p
}

func TestConcurrentGoroutines(t *testing.T) {
	db := openDB(t)
	q := db.Queue("q")
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				if _, err := q.Enqueue(bg, i, nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if st := must(q.Stats(bg)); st.Pending != 200 {
		t.Fatal(st.Pending)
	}
}

func TestDelayExpiryWithClock(t *testing.T) {
	db := openDB(t)
	t0 := time.UnixMilli(1_700_000_000_000)
	check(t, db.SetTime(t0))
	q := db.Queue("q")
	id := must(q.Enqueue(bg, 1, &tocsin.EnqueueOptions{Delay: time.Hour}))
	exp := must(q.Enqueue(bg, 2, &tocsin.EnqueueOptions{Expires: time.Minute}))
	if j := must(q.Get(bg, id)); j.State != "scheduled" || !j.RunAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("%+v", j)
	}
	check(t, db.SetTime(t0.Add(2*time.Hour)))
	jobs := must(q.Claim(bg, "w", 10, 0))
	if len(jobs) != 1 || jobs[0].ID != id {
		t.Fatalf("%+v", jobs)
	}
	if j := must(q.Get(bg, exp)); j.State != "dead" || j.Reason != "expired" {
		t.Fatalf("%+v", j)
	}
	check(t, db.SetTime(time.Time{}))
	if d := time.Since(db.Now()); d < -time.Minute || d > time.Minute {
		t.Fatal("system clock not restored", db.Now())
	}
}

// At the context's deadline, WaitResult's error says why there is no outcome yet.
func TestWaitResultTimeoutSaysWhy(t *testing.T) {
	db := openDB(t)
	q := db.Queue("why")
	id, err := q.Enqueue(bg, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	wait := func() error {
		ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
		defer cancel()
		_, err := db.WaitResult(ctx, id)
		if !errors.Is(err, tocsin.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("want ErrTimeout matching DeadlineExceeded, got %v", err)
		}
		return err
	}
	want := fmt.Sprintf(`tocsin: result_wait: no result for job %d by the context's deadline: job %d was never claimed: no worker took it from queue "why"`, id, id)
	if err := wait(); err.Error() != want {
		t.Fatalf("got %q\nwant %q", err, want)
	}
	jobs, err := q.Claim(bg, "w-why", 1, time.Minute)
	if err != nil || len(jobs) != 1 {
		t.Fatal(jobs, err)
	}
	if err := wait(); !strings.Contains(err.Error(), "is running (attempt 1 of ") || !strings.Contains(err.Error(), "worker w-why)") {
		t.Fatal(err)
	}
	if err := q.Retry(bg, &jobs[0], time.Minute, "flaky"); err != nil {
		t.Fatal(err)
	}
	if err := wait(); !strings.Contains(err.Error(), "is retrying: attempt 1 of ") || !strings.Contains(err.Error(), "ended (flaky)") {
		t.Fatal(err)
	}
	// a context already ended before the wait: its own error, no check
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := db.WaitResult(ctx, id); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
