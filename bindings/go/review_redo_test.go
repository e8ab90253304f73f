package tocsin_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

// A value encoding/json refuses (a channel, a func, NaN, a cycle) passed as a payload,
// result, event or meta is ErrInvalid naming the part of the call, wrapping json's
// error; nothing is written.
func TestUnencodableValuesRefused(t *testing.T) {
	db := openDB(t)
	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	bad := map[string]any{"chan": make(chan int), "func": func() {}, "NaN": math.NaN(), "cycle": cyclic}

	must(db.Queue("q").Enqueue(bg, "held", nil))
	job := must(db.Queue("q").ClaimOne(bg, "w", time.Minute))
	sum := tocsin.Task(db, "sum", func(ctx context.Context, n any) (int, error) { return 0, nil }, nil)

	for kind, v := range bad {
		calls := []struct {
			what string
			f    func() error
		}{
			{"Enqueue payload", func() error { _, err := db.Queue("q").Enqueue(bg, v, nil); return err }},
			{"EnqueueOptions.Meta", func() error {
				_, err := db.Queue("q").Enqueue(bg, 1, &tocsin.EnqueueOptions{Meta: map[string]any{"x": v}})
				return err
			}},
			{"EnqueueMany payload of job 1", func() error {
				_, err := db.Queue("q").EnqueueMany(bg, []tocsin.JobSpec{{Payload: 1}, {Payload: v}})
				return err
			}},
			{"Publish payload", func() error { _, err := db.Stream("s").Publish(bg, v, nil); return err }},
			{"PublishOptions.Meta", func() error {
				_, err := db.Stream("s").Publish(bg, 1, &tocsin.PublishOptions{Meta: map[string]any{"x": v}})
				return err
			}},
			{"PublishMany payload of event 1", func() error { _, err := db.Stream("s").PublishMany(bg, []any{1, v}, nil); return err }},
			{"Notify payload", func() error { _, err := db.Notify(bg, "c", v, nil); return err }},
			{"Notify meta", func() error { _, err := db.Notify(bg, "c", 1, map[string]any{"x": v}); return err }},
			{"SaveResult value", func() error { return db.SaveResult(bg, job.ID, v, 0) }},
			{"Complete value", func() error { return db.Complete(bg, job.ID, job.Token, v, 0) }},
			{"SetSchedule payload", func() error { _, err := db.SetSchedule(bg, "s", "* * * * *", "q", v, nil); return err }},
			{"ScheduleOptions.Meta", func() error {
				_, err := db.SetSchedule(bg, "s", "* * * * *", "q", 1, &tocsin.ScheduleOptions{Meta: map[string]any{"x": v}})
				return err
			}},
			{"Call args", func() error { _, err := db.Call(bg, "q", "sum", []any{v}, nil, nil); return err }},
			{"Call kwargs", func() error { _, err := db.Call(bg, "q", "sum", nil, map[string]any{"x": v}, nil); return err }},
			{"Call args of task sum", func() error { _, err := sum.Call(bg, v, nil); return err }},
			{"Periodic args of task sum", func() error { return sum.Periodic("* * * * *", v, nil) }},
			{"EnqueueTx payload", func() error { _, err := tocsin.EnqueueTx(bg, nil, "q", v, nil); return err }},
			{"NotifyTx payload", func() error { _, err := tocsin.NotifyTx(bg, nil, "c", v, nil); return err }},
			{"PublishTx payload", func() error { _, err := tocsin.PublishTx(bg, nil, "s", v, nil); return err }},
			{"CallTx args", func() error { _, err := tocsin.CallTx(bg, nil, "q", "sum", []any{v}, nil, nil); return err }},
		}
		for _, c := range calls {
			err := c.f()
			if !errors.Is(err, tocsin.ErrInvalid) {
				t.Errorf("%s (%s): want ErrInvalid, got %v", c.what, kind, err)
				continue
			}
			if !strings.Contains(err.Error(), c.what) {
				t.Errorf("%s (%s): the error does not name the part of the call: %v", c.what, kind, err)
			}
			var ute *json.UnsupportedTypeError
			var uve *json.UnsupportedValueError
			if !errors.As(err, &ute) && !errors.As(err, &uve) {
				t.Errorf("%s (%s): json's error is not wrapped: %v (%T)", c.what, kind, err, errors.Unwrap(err))
			}
		}
	}
	// nothing was written
	if st := must(db.Queue("q").Stats(bg)); st.Pending+st.Scheduled != 0 || st.Processing != 1 {
		t.Fatalf("jobs written: %+v", st)
	}
	if evs := must(db.Stream("s").Read(bg, 0, 10)); len(evs) != 0 {
		t.Fatalf("events written: %v", evs)
	}
	if id := must(db.NotifyMaxID(bg)); id != 0 {
		t.Fatalf("notifications written: max id %d", id)
	}
	if s := must(db.Schedules(bg)); len(s) != 0 {
		t.Fatalf("schedules written: %v", s)
	}
	if _, err := db.Result(bg, job.ID); !errors.Is(err, tocsin.ErrNotFound) {
		t.Fatalf("a result was written: %v", err)
	}
	if j := must(db.Job(bg, job.ID)); j.State != "processing" {
		t.Fatalf("the claimed job was completed: %s", j.State)
	}
}

// NewWorker on a closed DB is ErrClosed (with or without tasks: not ErrInvalid for
// "no queues", not a panic).
func TestNewWorkerOnClosedDB(t *testing.T) {
	db := openDB(t)
	check(t, db.Close())
	_, err := db.NewWorker(tocsin.WorkerOptions{Logger: quiet})
	wantCode(t, err, tocsin.ErrClosed)

	db2 := openDB(t)
	tocsin.Task(db2, "t", func(ctx context.Context, n int) (int, error) { return n, nil }, nil)
	check(t, db2.Close())
	_, err = db2.NewWorker(tocsin.WorkerOptions{Logger: quiet})
	wantCode(t, err, tocsin.ErrClosed)
	_, err = db2.NewWorker(tocsin.WorkerOptions{Logger: quiet, Queues: []string{"q"}, Concurrency: 2})
	wantCode(t, err, tocsin.ErrClosed)
}

// Task and TaskTx with a nil handler panic at the declaration (a programming error),
// naming the task; nothing is declared.
func TestTaskNilHandlerPanics(t *testing.T) {
	db := openDB(t)
	wantPanic := func(what string, f func()) {
		t.Helper()
		defer func() {
			t.Helper()
			p := recover()
			msg, _ := p.(string)
			if p == nil || !strings.Contains(msg, "nil") || !strings.Contains(msg, `"job"`) {
				t.Fatalf("%s with a nil handler: want a panic naming the task, got %v", what, p)
			}
		}()
		f()
	}
	wantPanic("Task", func() { tocsin.Task[int, int](db, "job", nil, nil) })
	wantPanic("TaskTx", func() { tocsin.TaskTx[int, int](db, "job", nil, nil) })
	// nothing declared: a worker has no queue to work
	_, err := db.NewWorker(tocsin.WorkerOptions{Logger: quiet})
	wantCode(t, err, tocsin.ErrInvalid)
}
