package tocsin

/*
#include <stdlib.h>
#include "tocsin.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"time"
	"unsafe"
)

// CallOptions of a task call: the envelope's fields and the job's options.
type CallOptions struct {
	ResultTTL time.Duration   // > 0: keep the result this long; 0: the task's default
	Timeout   time.Duration   // > 0: a longer run fails the attempt (Timeout); 0: the task's
	Job       *EnqueueOptions // priority, delay, max_attempts (retries + 1), meta, ...
}

// TaskHandle is an enqueued task call; any runtime can read its outcome.
type TaskHandle struct {
	db    *DB
	JobID int64
}

// Result waits for the call's outcome (see DB.WaitResult).
func (h *TaskHandle) Result(ctx context.Context) (*Result, error) {
	return h.db.WaitResult(ctx, h.JobID)
}

// Get waits for the outcome and decodes the value into v (a *TaskError when the task failed).
func (h *TaskHandle) Get(ctx context.Context, v any) error {
	r, err := h.Result(ctx)
	if err != nil {
		return err
	}
	return r.Decode(v)
}

// Call enqueues a call of task `task` -- registered by a worker of any runtime -- on
// queue, with positional args (nil: []) and keyword args (nil: {}); the envelope is
// the core's (tocsin_task_enqueue, docs/sql.md "Task envelope").
func (c *conn) Call(ctx context.Context, queue, task string, args []any, kwargs map[string]any, opts *CallOptions) (*TaskHandle, error) {
	var a, k string
	var err error
	if args != nil {
		if a, err = marshal(args, "Call args"); err != nil {
			return nil, err
		}
	}
	if kwargs != nil {
		if k, err = marshal(kwargs, "Call kwargs"); err != nil {
			return nil, err
		}
	}
	id, err := c.callRaw(ctx, queue, task, a, k, opts)
	if err != nil {
		return nil, err
	}
	return &TaskHandle{db: c.db, JobID: id}, nil
}

// check refuses a negative ResultTTL or Timeout, naming it.
func (o *CallOptions) check() error {
	if err := nonNeg("task_enqueue", "CallOptions.ResultTTL", o.ResultTTL); err != nil {
		return err
	}
	return nonNeg("task_enqueue", "CallOptions.Timeout", o.Timeout)
}

func (o *CallOptions) fill(cs *cstrings, call *C.tocsin_task_call, eo *C.tocsin_enqueue_opts) error {
	call.version = C.TOCSIN_TASK_CALL_VERSION
	var job *EnqueueOptions
	if o != nil {
		if err := o.check(); err != nil {
			return err
		}
		call.result_ttl_ms = C.int64_t(ms(o.ResultTTL))
		call.timeout_ms = C.int64_t(ms(o.Timeout))
		job = o.Job
	}
	return job.fill(cs, eo)
}

func (c *conn) callRaw(ctx context.Context, queue, task, args, kwargs string, opts *CallOptions) (int64, error) {
	var cs cstrings
	defer cs.free()
	var call C.tocsin_task_call
	var eo C.tocsin_enqueue_opts
	if err := opts.fill(&cs, &call, &eo); err != nil {
		return 0, err
	}
	call.task, call.args, call.kwargs = cs.str(task), cs.opt(args), cs.opt(kwargs)
	cq := cs.str(queue)
	var id C.int64_t
	err := c.doCS(ctx, &cs, "task_enqueue", func(p *C.tocsin_db) C.int {
		return C.tocsin_task_enqueue(p, &id, cq, &call, &eo)
	})
	return int64(id), err
}

// Envelope is the core's task envelope JSON of a call (for schedules and SQL callers).
func (c *conn) Envelope(task, args, kwargs string, opts *CallOptions) (json.RawMessage, error) {
	var cs cstrings
	defer cs.free()
	var call C.tocsin_task_call
	var eo C.tocsin_enqueue_opts
	if err := opts.fill(&cs, &call, &eo); err != nil {
		return nil, err
	}
	call.task, call.args, call.kwargs = cs.str(task), cs.opt(args), cs.opt(kwargs)
	var out *C.char
	if err := c.doCS(context.Background(), &cs, "task_envelope", func(p *C.tocsin_db) C.int { return C.tocsin_task_envelope(p, &out, &call) }); err != nil {
		return nil, err
	}
	s := C.GoString(out)
	C.tocsin_free(unsafe.Pointer(out))
	return json.RawMessage(s), nil
}

// TaskOptions of a task this program runs.
type TaskOptions struct {
	Queue       string        // where calls go; "": "default"
	BackoffBase time.Duration // retry delay base (exponential, capped, jittered); 0: 1s
	BackoffCap  time.Duration // 0: 1h
	Timeout     time.Duration // default run timeout; 0: none
	ResultTTL   time.Duration // default result lifetime: > 0 this long, 0 one day, < 0 forever
	// MaxAttempts bounds the runs of each job of the task on this process's workers
	// (its retries + 1), whatever the call's own MaxAttempts allowed: a call by name
	// from another runtime knows nothing of it. Hand-backs do not count; 0: the job's own.
	MaxAttempts int
}

// handler runs one call: args/kwargs JSON in, result JSON out; tx is the run's
// transaction for TaskTx tasks, nil otherwise.
type handler func(ctx context.Context, tx *Tx, args, kwargs json.RawMessage) (json.RawMessage, error)

type taskEntry struct {
	name     string
	opts     TaskOptions
	inTx     bool
	run      handler
	periodic []periodicSpec
}

type periodicSpec struct {
	cron   string
	kwargs string
	args   string
	opts   *ScheduleOptions
}

type registry struct {
	mu    sync.Mutex
	tasks map[string]*taskEntry
}

func (db *DB) registry() *registry {
	db.regOnce.Do(func() { db.reg = &registry{tasks: map[string]*taskEntry{}} })
	return db.reg
}

// TaskDef is a typed task: its handler (run by a Worker of this program) and typed calls.
//
// Arguments: a call made from Go sends Args as the envelope's kwargs when it encodes as
// a JSON object, else as the one positional argument. The handler decodes Args from
// kwargs when they are not empty, else from the only positional argument, else from the
// array of positional arguments -- so a Python call send_email(to=..., subject=...)
// fills a struct and send_email("x") a string. A call with no arguments at all decodes
// Args from the empty kwargs {} when Args takes an object (a struct, a map, any), else
// from the empty array [] (a slice or array Args: an empty one).
type TaskDef[Args, Res any] struct {
	db    *DB
	entry *taskEntry
}

// Task declares task `name` on db with its handler fn. The name is the contract across
// runtimes: any runtime may call it, and read its results. A nil fn or a nil db is a
// programming error: Task panics (at the declaration, not at the first run).
func Task[Args, Res any](db *DB, name string, fn func(ctx context.Context, args Args) (Res, error), opts *TaskOptions) *TaskDef[Args, Res] {
	if fn == nil {
		panic(nilHandler("Task", name))
	}
	if db == nil {
		panic(nilDB("Task", name))
	}
	return declare[Args, Res](db, name, false, func(ctx context.Context, _ *Tx, a Args) (Res, error) { return fn(ctx, a) }, opts)
}

// TaskTx declares a task whose handler writes through tx, a transaction in which the
// worker also records the run's outcome (tocsin_worker_finish with a transaction): the
// handler's database effects, its result and its ack commit together, or -- when the
// handler fails, or its lease was lost meanwhile (ErrLeaseLost) -- not at all.
// Exactly-once effects for work whose effects live in the same database. A nil fn or
// db panics, as with Task.
func TaskTx[Args, Res any](db *DB, name string, fn func(ctx context.Context, tx *Tx, args Args) (Res, error), opts *TaskOptions) *TaskDef[Args, Res] {
	if fn == nil {
		panic(nilHandler("TaskTx", name))
	}
	if db == nil {
		panic(nilDB("TaskTx", name))
	}
	return declare[Args, Res](db, name, true, fn, opts)
}

func nilHandler(fn, name string) string {
	return "tocsin: " + fn + "(" + strconv.Quote(name) + "): the handler is nil"
}

func nilDB(fn, name string) string {
	return "tocsin: " + fn + "(" + strconv.Quote(name) + "): db is nil"
}

func declare[Args, Res any](db *DB, name string, inTx bool, fn func(ctx context.Context, tx *Tx, args Args) (Res, error), opts *TaskOptions) *TaskDef[Args, Res] {
	var o TaskOptions
	if opts != nil {
		o = *opts
	}
	if o.Queue == "" {
		o.Queue = "default"
	}
	e := &taskEntry{name: name, opts: o, inTx: inTx}
	e.run = func(ctx context.Context, tx *Tx, args, kwargs json.RawMessage) (json.RawMessage, error) {
		var a Args
		if err := decodeArgs(args, kwargs, &a); err != nil {
			return nil, &permanent{&TaskError{Type: "InvalidArguments", Message: err.Error()}}
		}
		res, err := fn(ctx, tx, a)
		if err != nil {
			return nil, err
		}
		b, err := jsonText(res)
		if err == nil {
			err = checkUTF8(b, res, "result")
		}
		if err != nil {
			return nil, &permanent{&TaskError{Type: "SerializationError", Message: err.Error()}}
		}
		return b, nil
	}
	r := db.registry()
	r.mu.Lock()
	r.tasks[name] = e
	r.mu.Unlock()
	return &TaskDef[Args, Res]{db: db, entry: e}
}

func decodeArgs(args, kwargs json.RawMessage, out any) error {
	if len(kwargs) > 0 && string(kwargs) != "{}" {
		return json.Unmarshal(kwargs, out)
	}
	var list []json.RawMessage
	if err := json.Unmarshal(args, &list); err != nil {
		return err
	}
	switch len(list) {
	case 0:
		// no arguments at all (args [] and kwargs {}, as a no-argument call of any
		// runtime sends): the empty kwargs for an Args that takes an object (a struct,
		// a map, any), else the empty array of positional arguments (a slice, an array)
		if err := json.Unmarshal([]byte("{}"), out); err == nil {
			return nil
		}
		return json.Unmarshal([]byte("[]"), out)
	case 1:
		return json.Unmarshal(list[0], out)
	}
	return json.Unmarshal(args, out)
}

func encodeArgs(a any, what string) (args, kwargs string, err error) {
	b, err := jsonText(a)
	if err != nil {
		return "", "", encodeErr(what, err)
	}
	if err := checkUTF8(b, a, what); err != nil {
		return "", "", err
	}
	if len(b) > 0 && b[0] == '{' {
		return "", string(b), nil
	}
	return "[" + string(b) + "]", "", nil
}

// Name is the task's name; Queue the queue its calls go to.
func (t *TaskDef[Args, Res]) Name() string  { return t.entry.name }
func (t *TaskDef[Args, Res]) Queue() string { return t.entry.opts.Queue }

// Call enqueues a call with args; Handle.Get waits for the typed result.
func (t *TaskDef[Args, Res]) Call(ctx context.Context, args Args, opts *CallOptions) (*TypedHandle[Res], error) {
	return t.callOn(ctx, &t.db.conn, args, opts)
}

// CallTx enqueues a call inside tx (committed or rolled back with it).
func (t *TaskDef[Args, Res]) CallTx(ctx context.Context, tx *Tx, args Args, opts *CallOptions) (*TypedHandle[Res], error) {
	if tx == nil {
		return nil, newErr(ErrInvalid, "task_enqueue", "tx must not be nil (CallTx enqueues inside a transaction: use Call without one)")
	}
	return t.callOn(ctx, &tx.conn, args, opts)
}

func (t *TaskDef[Args, Res]) callOn(ctx context.Context, c *conn, args Args, opts *CallOptions) (*TypedHandle[Res], error) {
	a, k, err := encodeArgs(args, "Call args of task "+t.entry.name)
	if err != nil {
		return nil, err
	}
	id, err := c.callRaw(ctx, t.entry.opts.Queue, t.entry.name, a, k, opts)
	if err != nil {
		return nil, err
	}
	return &TypedHandle[Res]{TaskHandle{db: t.db, JobID: id}}, nil
}

// Periodic asks the workers of this program to keep a schedule "periodic:<name>" that
// calls the task with args at every boundary of cron (written when a Worker starts).
func (t *TaskDef[Args, Res]) Periodic(cron string, args Args, opts *ScheduleOptions) error {
	if _, _, err := CronNext(cron, time.Now(), opts != nil && opts.LocalTime); err != nil {
		return err // refused now, not when a Worker starts
	}
	a, k, err := encodeArgs(args, "Periodic args of task "+t.entry.name)
	if err != nil {
		return err
	}
	r := t.db.registry()
	r.mu.Lock()
	t.entry.periodic = append(t.entry.periodic, periodicSpec{cron: cron, args: a, kwargs: k, opts: opts})
	r.mu.Unlock()
	return nil
}

// TypedHandle is a typed task call.
type TypedHandle[Res any] struct{ TaskHandle }

// Get waits for the call's result (a *TaskError when the task failed, JobDead when its
// job died without one).
func (h *TypedHandle[Res]) Get(ctx context.Context) (Res, error) {
	var v Res
	err := h.TaskHandle.Get(ctx, &v)
	return v, err
}

// Permanent marks a handler's error as final: the job fails now, without retries.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanent{err}
}

type permanent struct{ err error }

func (p *permanent) Error() string { return p.err.Error() }
func (p *permanent) Unwrap() error { return p.err }
