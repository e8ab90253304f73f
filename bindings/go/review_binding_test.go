package tocsin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

// noPanic runs f, turning a panic into a test error (a nil argument must be an error,
// not a crash).
func noPanic(t *testing.T, label string, f func() error) error {
	t.Helper()
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s panicked: %v", label, r)
				err = nil
			}
		}()
		err = f()
	}()
	return err
}

func wantInvalidNaming(t *testing.T, label string, err error, words ...string) {
	t.Helper()
	if !errors.Is(err, tocsin.ErrInvalid) {
		t.Errorf("%s: want ErrInvalid, got %v", label, err)
		return
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: the error does not name %q: %v", label, w, err)
		}
	}
}

// A nil *Job, *Tx, fn or ctx is ErrInvalid naming it (it panicked with a nil-pointer
// dereference); nothing is written.
func TestNilArgumentsAreInvalid(t *testing.T) {
	db := openDB(t)
	q := db.Queue("q")
	send := tocsin.Task(db, "send", func(ctx context.Context, a int) (int, error) { return a, nil }, nil)
	var nilCtx context.Context
	for _, c := range []struct {
		label string
		f     func() error
		words []string
	}{
		{"Ack(nil)", func() error { return q.Ack(bg, nil) }, []string{"job"}},
		{"Retry(nil)", func() error { return q.Retry(bg, nil, 0, "x") }, []string{"job"}},
		{"Fail(nil)", func() error { return q.Fail(bg, nil, "x") }, []string{"job"}},
		{"Heartbeat(nil)", func() error { return q.Heartbeat(bg, nil, time.Second) }, []string{"job"}},
		{"Tx.Queue.Ack(nil)", func() error {
			return db.Tx(bg, func(tx *tocsin.Tx) error { return tx.Queue("q").Ack(bg, nil) })
		}, []string{"job"}},
		{"TaskDef.CallTx(nil tx)", func() error { _, err := send.CallTx(bg, nil, 1, nil); return err }, []string{"tx"}},
		{"db.Tx(nil fn)", func() error { return db.Tx(bg, nil) }, []string{"fn"}},
		{"Enqueue(nil ctx)", func() error { _, err := q.Enqueue(nilCtx, 1, nil); return err }, []string{"ctx"}},
		{"WaitResult(nil ctx)", func() error { _, err := db.WaitResult(nilCtx, 1); return err }, []string{"ctx"}},
		{"Queue.Wait(nil ctx)", func() error { return q.Wait(nilCtx) }, []string{"ctx"}},
		{"Listen(nil ctx)", func() error { _, err := db.Listen(nilCtx, "c", nil); return err }, []string{"ctx"}},
		{"Lock.Acquire(nil ctx)", func() error { return db.Lock("l", "o", time.Second).Acquire(nilCtx) }, []string{"ctx"}},
		{"db.Tx(nil ctx)", func() error { return db.Tx(nilCtx, func(*tocsin.Tx) error { return nil }) }, []string{"ctx"}},
	} {
		wantInvalidNaming(t, c.label, noPanic(t, c.label, c.f), c.words...)
	}
	w := must(db.NewWorker(tocsin.WorkerOptions{Logger: quiet}))
	wantInvalidNaming(t, "Worker.Run(nil ctx)", noPanic(t, "Worker.Run", func() error { return w.Run(nilCtx) }), "ctx")
	if _, ok := tocsin.Run(nilCtx); ok {
		t.Error("Run(nil) reports a run")
	}
	// Task has no error to return: a nil db panics at the declaration, naming it
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "db is nil") {
				t.Errorf("Task(nil db): want a panic naming db, got %v", r)
			}
		}()
		tocsin.Task(nil, "t", func(ctx context.Context, a int) (int, error) { return a, nil }, nil)
	}()
	if st := must(db.Stats(bg)); len(st) != 0 {
		t.Fatalf("a refused call wrote: %+v", st)
	}
}

// An empty batch is an empty result, as in the core and the other bindings (it was
// ErrInvalid "no jobs" / "no events"); the topic is still checked.
func TestEmptyBatches(t *testing.T) {
	db := openDB(t)
	for _, jobs := range [][]tocsin.JobSpec{nil, {}} {
		ids, err := db.Queue("q").EnqueueMany(bg, jobs)
		if err != nil || ids == nil || len(ids) != 0 {
			t.Errorf("EnqueueMany(%#v) = %#v, %v; want an empty slice", jobs, ids, err)
		}
	}
	for _, vals := range [][]any{nil, {}} {
		offs, err := db.Stream("s").PublishMany(bg, vals, nil)
		if err != nil || offs == nil || len(offs) != 0 {
			t.Errorf("PublishMany(%#v) = %#v, %v; want an empty slice", vals, offs, err)
		}
	}
	err := db.Tx(bg, func(tx *tocsin.Tx) error {
		if ids, err := tx.Queue("q").EnqueueMany(bg, nil); err != nil || len(ids) != 0 {
			return fmt.Errorf("in a Tx: %v, %v", ids, err)
		}
		_, err := tx.Stream("s").PublishMany(bg, []any{}, []string{})
		return err
	})
	check(t, err)
	_, err = db.Stream("").PublishMany(bg, nil, nil)
	wantCode(t, err, tocsin.ErrInvalid)
	if st := must(db.Stats(bg)); len(st) != 0 {
		t.Fatalf("an empty batch wrote: %+v", st)
	}
	if ev := must(db.Stream("s").Read(bg, 0, 10)); len(ev) != 0 {
		t.Fatalf("an empty batch published: %+v", ev)
	}
}

// A count option beyond the core's bounds is refused naming the Go option and the value
// as given, not one cut to a C int first (MaxAttempts 1<<40 was reported as 2147483647).
func TestCountOptionsNameTheValueGiven(t *testing.T) {
	db := openDB(t)
	const huge = 1 << 40
	_, err := db.Queue("q").Enqueue(bg, 1, &tocsin.EnqueueOptions{MaxAttempts: huge})
	wantInvalidNaming(t, "EnqueueOptions.MaxAttempts", err, "EnqueueOptions.MaxAttempts", "1099511627776")
	_, err = db.Queue("q").EnqueueMany(bg, []tocsin.JobSpec{{Payload: 1, Options: &tocsin.EnqueueOptions{MaxAttempts: huge}}})
	wantInvalidNaming(t, "EnqueueMany MaxAttempts", err, "1099511627776")
	_, err = db.Queue("q").Enqueue(bg, 1, &tocsin.EnqueueOptions{MaxAttempts: -huge})
	wantInvalidNaming(t, "negative MaxAttempts", err, "-1099511627776")
	_, err = db.SetSchedule(bg, "s", "* * * * *", "q", 1, &tocsin.ScheduleOptions{MaxAttempts: huge})
	wantInvalidNaming(t, "ScheduleOptions.MaxAttempts", err, "ScheduleOptions.MaxAttempts", "1099511627776")
	_, err = db.SetSchedule(bg, "s", "* * * * *", "q", 1, &tocsin.ScheduleOptions{MaxCatchUp: huge})
	wantInvalidNaming(t, "ScheduleOptions.MaxCatchUp", err, "ScheduleOptions.MaxCatchUp", "1099511627776")
	_, err = db.NewWorker(tocsin.WorkerOptions{Queues: []string{"q"}, Concurrency: huge, Logger: quiet})
	wantInvalidNaming(t, "WorkerOptions.Concurrency", err, "WorkerOptions.Concurrency", "1099511627776")
	_, err = db.NewWorker(tocsin.WorkerOptions{Queues: []string{"q"}, UnknownTaskHandbacks: huge, Logger: quiet})
	wantInvalidNaming(t, "WorkerOptions.UnknownTaskHandbacks", err, "WorkerOptions.UnknownTaskHandbacks", "1099511627776")
	// a busy timeout the core's C int cannot hold is refused, not cut to ~24.8 days
	_, err = tocsin.Open(filepath.Join(t.TempDir(), "b.db"), &tocsin.Options{BusyTimeout: 1000 * time.Hour})
	wantInvalidNaming(t, "Options.BusyTimeout", err, "Options.BusyTimeout", "1000h0m0s")
	// the bounds themselves still pass
	_, err = db.Queue("q").Enqueue(bg, 1, &tocsin.EnqueueOptions{MaxAttempts: 1000000})
	check(t, err)
	if st := must(db.Queue("q").Stats(bg)); st.Pending != 1 {
		t.Fatalf("want only the valid job: %+v", st)
	}
}

type badText struct{}

func (badText) MarshalText() ([]byte, error) { return []byte("t\xfe"), nil }

type Named struct {
	Name  string            `json:"name"`
	Tags  []string          `json:"tags"`
	Extra map[string]string `json:"extra"`
	Skip  string            `json:"-"`
}

// A string that is not valid UTF-8 anywhere in a value encoded with encoding/json
// (payloads, meta, args, kwargs, results, events) is ErrInvalid naming where; it was
// stored altered ("caf\xe9" as "caf\ufffd"). Nothing is written. A valid U+FFFD, and
// JSON a json.RawMessage holds, pass unchanged.
func TestInvalidUTF8IsRefused(t *testing.T) {
	db := openDB(t)
	q := db.Queue("q")
	s := db.Stream("s")
	bad := "caf\xe9"
	values := map[string]any{
		"string":        bad,
		"map value":     map[string]string{"name": bad},
		"map key":       map[string]int{bad: 1},
		"struct field":  Named{Name: bad},
		"slice element": Named{Tags: []string{"ok", bad}},
		"nested map":    &Named{Extra: map[string]string{"k": bad}},
		"any":           []any{map[string]any{"x": []any{bad}}},
		"TextMarshaler": map[string]any{"t": badText{}},
	}
	for label, v := range values {
		for _, c := range []struct {
			what string
			f    func() error
		}{
			{"Enqueue", func() error { _, err := q.Enqueue(bg, v, nil); return err }},
			{"EnqueueOptions.Meta", func() error {
				_, err := q.Enqueue(bg, 1, &tocsin.EnqueueOptions{Meta: map[string]any{"m": v}})
				return err
			}},
			{"EnqueueMany", func() error { _, err := q.EnqueueMany(bg, []tocsin.JobSpec{{Payload: 1}, {Payload: v}}); return err }},
			{"Publish", func() error { _, err := s.Publish(bg, v, nil); return err }},
			{"PublishOptions.Meta", func() error {
				_, err := s.Publish(bg, 1, &tocsin.PublishOptions{Meta: map[string]any{"m": v}})
				return err
			}},
			{"PublishMany", func() error { _, err := s.PublishMany(bg, []any{1, v}, nil); return err }},
			{"Notify", func() error { _, err := db.Notify(bg, "c", v, nil); return err }},
			{"Notify meta", func() error { _, err := db.Notify(bg, "c", 1, map[string]any{"m": v}); return err }},
			{"SaveResult", func() error { return db.SaveResult(bg, 1, v, 0) }},
			{"Call args", func() error { _, err := db.Call(bg, "q", "t", []any{v}, nil, nil); return err }},
			{"Call kwargs", func() error { _, err := db.Call(bg, "q", "t", nil, map[string]any{"k": v}, nil); return err }},
			{"SetSchedule", func() error { _, err := db.SetSchedule(bg, "s", "* * * * *", "q", v, nil); return err }},
			{"Tx Enqueue", func() error {
				return db.Tx(bg, func(tx *tocsin.Tx) error { _, err := tx.Queue("q").Enqueue(bg, v, nil); return err })
			}},
		} {
			err := c.f()
			if !errors.Is(err, tocsin.ErrInvalid) || !strings.Contains(err.Error(), "UTF-8") {
				t.Errorf("%s of %s: want ErrInvalid naming UTF-8, got %v", c.what, label, err)
			}
		}
	}
	typed := tocsin.Task(db, "typed", func(ctx context.Context, a Named) (int, error) { return 0, nil }, &tocsin.TaskOptions{Queue: "q"})
	_, err := typed.Call(bg, Named{Name: bad}, nil)
	wantInvalidNaming(t, "TaskDef.Call", err, "UTF-8")
	wantInvalidNaming(t, "TaskDef.Periodic", typed.Periodic("* * * * *", Named{Tags: []string{bad}}, nil), "UTF-8")
	if st := must(db.Stats(bg)); len(st) != 0 {
		t.Fatalf("a refused call wrote: %+v", st)
	}
	if ev := must(s.Read(bg, 0, 10)); len(ev) != 0 {
		t.Fatalf("a refused call published: %+v", ev)
	}
	if _, err := db.Result(bg, 1); !errors.Is(err, tocsin.ErrNotFound) {
		t.Fatalf("a refused result was saved: %v", err)
	}
	if _, err := db.GetSchedule(bg, "s"); !errors.Is(err, tocsin.ErrNotFound) {
		t.Fatalf("a refused schedule was saved: %v", err)
	}
	// valid texts are kept as they are: a real U+FFFD, the escape a RawMessage holds,
	// a "\\ufffd" that is only text, bytes (base64)
	for _, v := range []any{"caf\ufffd", json.RawMessage(`{"a":"\ufffd"}`), `back\ufffd`, []byte{0xe9}, Named{Skip: bad, Name: "ok"}} {
		id := must(q.Enqueue(bg, v, nil))
		want, _ := json.Marshal(v)
		if r, ok := v.(json.RawMessage); ok {
			want = r
		}
		if j := must(q.Get(bg, id)); string(j.Payload) != string(want) {
			t.Errorf("%#v stored as %s, want %s", v, j.Payload, want)
		}
	}
}

// A handler result that is not valid UTF-8 is a SerializationError, not a result stored
// altered.
func TestTaskResultInvalidUTF8(t *testing.T) {
	db := openDB(t)
	task := tocsin.Task(db, "bad_result", func(ctx context.Context, a int) (map[string]string, error) {
		return map[string]string{"r": "caf\xe9"}, nil
	}, &tocsin.TaskOptions{Queue: "q"})
	stop := runWorker(t, db, tocsin.WorkerOptions{})
	defer stop()
	h := must(task.Call(bg, 1, nil))
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	_, err := h.Get(ctx)
	var te *tocsin.TaskError
	if !errors.As(err, &te) || te.Type != "SerializationError" || !strings.Contains(te.Message, "UTF-8") {
		t.Fatalf("want a SerializationError naming UTF-8, got %v", err)
	}
}

// A task whose Args is a slice, called with no arguments (args [], kwargs {}: what a
// no-argument call of any runtime sends), gets an empty slice: it failed with
// InvalidArguments (decoding {} into []int). Struct and map Args still get {}.
func TestTaskNoArgumentsSliceArgs(t *testing.T) {
	db := openDB(t)
	o := &tocsin.TaskOptions{Queue: "w"}
	tocsin.Task(db, "slice", func(ctx context.Context, a []int) (int, error) { return len(a) + 100, nil }, o)
	tocsin.Task(db, "array", func(ctx context.Context, a [0]string) (int, error) { return 200, nil }, o)
	tocsin.Task(db, "struct", func(ctx context.Context, a EmailArgs) (string, error) { return "to:" + a.To, nil }, o)
	tocsin.Task(db, "map", func(ctx context.Context, a map[string]int) (int, error) { return len(a) + 300, nil }, o)
	tocsin.Task(db, "string", func(ctx context.Context, a string) (string, error) { return a, nil }, o)
	stop := runWorker(t, db, tocsin.WorkerOptions{})
	defer stop()
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	get := func(task string, args []any, kwargs map[string]any) (json.RawMessage, error) {
		h := must(db.Call(ctx, "w", task, args, kwargs, nil))
		var v json.RawMessage
		err := h.Get(ctx, &v)
		return v, err
	}
	for _, c := range []struct {
		task string
		args []any
		want string
	}{
		{"slice", nil, "100"}, {"slice", []any{}, "100"}, {"slice", []any{1, 2, 3}, "103"},
		{"array", nil, "200"}, {"struct", nil, `"to:"`}, {"map", nil, "300"},
	} {
		v, err := get(c.task, c.args, nil)
		if err != nil || string(v) != c.want {
			t.Errorf("%s(%v): got %s, %v; want %s", c.task, c.args, v, err, c.want)
		}
	}
	// a task that needs an argument still refuses a call without one
	_, err := get("string", nil, nil)
	var te *tocsin.TaskError
	if !errors.As(err, &te) || te.Type != "InvalidArguments" {
		t.Errorf("string(): want InvalidArguments, got %v", err)
	}
}

// A call on the DB from inside the goroutine's own transaction on the same file (a
// nested db.Tx, a write that is not on tx, a TaskTx handler writing through the DB)
// would wait for the lock that transaction holds and fail as "database is locked" after
// the busy timeout: it is ErrInvalid saying why, at once. Reads on the DB still work;
// another goroutine's write waits for the commit as before.
func TestCallsInsideOwnTransaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	db := openDB2(t, path)
	other := openDB2(t, path) // a second handle on the same file
	q := db.Queue("q")
	check(t, db.Exec(bg, "CREATE TABLE app(x)"))
	otherDone := make(chan error, 1)
	err := db.Tx(bg, func(tx *tocsin.Tx) error {
		_, err := tx.Queue("q").Enqueue(bg, "in tx", nil)
		check(t, err)
		wantInvalidNaming(t, "nested db.Tx", db.Tx(bg, func(*tocsin.Tx) error { return nil }), "db.Tx")
		_, err = q.Enqueue(bg, "outside tx", nil)
		wantInvalidNaming(t, "db.Queue.Enqueue in fn", err, "transaction")
		_, err = db.Notify(bg, "c", 1, nil)
		wantInvalidNaming(t, "db.Notify in fn", err, "transaction")
		wantInvalidNaming(t, "db.Exec in fn", db.Exec(bg, "INSERT INTO app VALUES (1)"), "transaction")
		_, err = other.Queue("q").Enqueue(bg, "other handle", nil)
		wantInvalidNaming(t, "another handle on the file in fn", err, "transaction")
		wantInvalidNaming(t, "a nested Tx on another handle", other.Tx(bg, func(*tocsin.Tx) error { return nil }), "db.Tx")
		ok, err := db.Lock("l", "o", time.Minute).TryAcquire(bg)
		if ok || !errors.Is(err, tocsin.ErrInvalid) {
			t.Errorf("Lock.TryAcquire in fn: want ErrInvalid, got %v %v", ok, err)
		}
		// reads go on
		if st, err := q.Stats(bg); err != nil || st.Pending != 0 {
			t.Errorf("a read in fn: %+v %v", st, err)
		}
		// another goroutine is not refused: its write waits for the commit
		go func() { _, err := db.Queue("q").Enqueue(bg, "other goroutine", nil); otherDone <- err }()
		return nil
	})
	check(t, err)
	check(t, <-otherDone)
	if st := must(q.Stats(bg)); st.Pending != 2 {
		t.Fatalf("want the tx's job and the other goroutine's, got %+v", st)
	}
	// after the transaction, the goroutine's calls on the DB work again
	_, err = q.Enqueue(bg, "after", nil)
	check(t, err)
	check(t, db.Tx(bg, func(*tocsin.Tx) error { return nil }))

	// a TaskTx handler that writes through the DB instead of its tx
	tocsin.TaskTx(db, "in_tx", func(ctx context.Context, tx *tocsin.Tx, a int) (string, error) {
		_, err := db.Queue("side").Enqueue(ctx, a, nil)
		if err == nil {
			return "written", nil
		}
		if !errors.Is(err, tocsin.ErrInvalid) {
			return "", tocsin.Permanent(err)
		}
		_, err = tx.Queue("side").Enqueue(ctx, a, nil)
		return "refused", err
	}, &tocsin.TaskOptions{Queue: "tasks"})
	stop := runWorker(t, db, tocsin.WorkerOptions{})
	defer stop()
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	h := must(db.Call(ctx, "tasks", "in_tx", []any{7}, nil, nil))
	var got string
	if err := h.Get(ctx, &got); err != nil || got != "refused" {
		t.Fatalf("TaskTx handler: got %q, %v; want refused", got, err)
	}
	if st := must(db.Queue("side").Stats(bg)); st.Pending != 1 {
		t.Fatalf("want the job written through tx only: %+v", st)
	}
}

// Values are stored as the JSON text the other runtimes write for them: json.Marshal's
// HTML escaping (<, >, & as \u003c, \u003e, \u0026) made a payload up to six times as
// large, so a value Python, Node and Ruby store was refused as over the payload limit.
func TestJSONIsWrittenWithoutHTMLEscapes(t *testing.T) {
	db := openDB(t)
	q := db.Queue("html")
	v := map[string]string{"body": "<p>a & b</p>"}
	const want = `{"body":"<p>a & b</p>"}`
	id := must(q.Enqueue(bg, v, &tocsin.EnqueueOptions{Meta: v}))
	j := must(q.Get(bg, id))
	if string(j.Payload) != want || string(j.Meta) != want {
		t.Fatalf("payload %s meta %s, want %s", j.Payload, j.Meta, want)
	}
	// a value the other runtimes store within the limit (about 400 KB of JSON)
	if _, err := q.Enqueue(bg, strings.Repeat("<", 400000), nil); err != nil {
		t.Fatalf("400000 '<': %v", err)
	}
	// nested json.RawMessage is kept as written
	id = must(q.Enqueue(bg, map[string]any{"raw": json.RawMessage(`{"a":"<&>"}`)}, nil))
	if got := string(must(q.Get(bg, id)).Payload); got != `{"raw":{"a":"<&>"}}` {
		t.Errorf("raw message: %s", got)
	}
	s := db.Stream("html")
	off := must(s.Publish(bg, v, &tocsin.PublishOptions{Meta: v}))
	evs := must(s.Read(bg, off-1, 1))
	if string(evs[0].Payload) != want || string(evs[0].Meta) != want {
		t.Errorf("event %s meta %s", evs[0].Payload, evs[0].Meta)
	}
	nid := must(db.Notify(bg, "html", v, nil))
	ns := must(db.Notifications(bg, "html", nid-1, 1))
	if string(ns[0].Payload) != want {
		t.Errorf("notification %s", ns[0].Payload)
	}
	if err := db.SaveResult(bg, id, v, 0); err != nil {
		t.Fatal(err)
	}
	if r := must(db.Result(bg, id)); string(r.Value) != want {
		t.Errorf("result %s", r.Value)
	}
	// task arguments and a handler's result
	tocsin.Task(db, "tag", func(ctx context.Context, a map[string]string) (string, error) {
		return "<b>" + a["body"] + "</b>", nil
	}, &tocsin.TaskOptions{Queue: "tags"})
	h := must(db.Call(bg, "tags", "tag", nil, map[string]any{"body": v["body"]}, nil))
	if got := string(must(db.Queue("tags").Get(bg, h.JobID)).Payload); !strings.Contains(got, `"kwargs":`+want) {
		t.Errorf("call envelope %s", got)
	}
	stop := runWorker(t, db, tocsin.WorkerOptions{Queues: []string{"tags"}})
	defer stop()
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	r := must(db.WaitResult(ctx, h.JobID))
	if string(r.Value) != `"<b><p>a & b</p></b>"` {
		t.Errorf("task result %s", r.Value)
	}
}
