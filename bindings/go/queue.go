package tocsin

/*
#include <stdlib.h>
#include "tocsin.h"

static tocsin_job *go_job_at(tocsin_job *jobs, size_t i) { return &jobs[i]; }
*/
import "C"

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"
	"unsafe"
)

// Job is a job as stored.
type Job struct {
	ID          int64
	Queue       string
	State       string          // "scheduled", "pending", "processing" or "dead"
	Payload     json.RawMessage // JSON text
	Meta        json.RawMessage // JSON object or nil
	Priority    int64
	Attempts    int // claims so far
	MaxAttempts int
	Token       int64 // the fencing token of the current (or last) lease: pass it back as given
	RunAt       time.Time
	CreatedAt   time.Time
	LeaseUntil  time.Time // zero unless processing
	ExpiresAt   time.Time // zero: never
	UniqueKey   string
	Worker      string
	LastError   string
	Reason      string    // dead jobs: "failed", "max_attempts", "expired", "cancelled"
	DiedAt      time.Time // dead jobs
}

// Decode unmarshals the payload into v.
func (j *Job) Decode(v any) error { return json.Unmarshal(j.Payload, v) }

func raw(p *C.char) json.RawMessage {
	if p == nil {
		return nil
	}
	return json.RawMessage(C.GoString(p))
}

func jobFrom(j *C.tocsin_job) Job {
	return Job{
		ID: int64(j.id), Queue: goStr(j.queue), State: goStr(j.state),
		Payload: raw(j.payload), Meta: raw(j.meta), Priority: int64(j.priority),
		Attempts: int(j.attempts), MaxAttempts: int(j.max_attempts), Token: int64(j.token),
		RunAt: fromMs(int64(j.run_at)), CreatedAt: fromMs(int64(j.created_at)),
		LeaseUntil: fromMs(int64(j.lease_until)), ExpiresAt: fromMs(int64(j.expires_at)),
		UniqueKey: goStr(j.unique_key), Worker: goStr(j.worker), LastError: goStr(j.last_error),
		Reason: goStr(j.reason), DiedAt: fromMs(int64(j.died_at)),
	}
}

func jobsFrom(jobs *C.tocsin_job, n C.size_t) []Job {
	out := make([]Job, int(n))
	for i := range out {
		out[i] = jobFrom(C.go_job_at(jobs, C.size_t(i)))
	}
	C.tocsin_jobs_free(jobs, n)
	return out
}

// marshal gives the JSON text of v: a json.RawMessage is passed as is (the core
// validates it), anything else goes through encoding/json.
// marshal is v as JSON text (a json.RawMessage as is, nil as null). A value that
// encoding/json refuses (a channel, a func, NaN, a cycle) is ErrInvalid naming what is
// the part of the call (what: "Enqueue payload") and wrapping json's error, and so is a
// string that is not valid UTF-8 (encoding/json would replace its bytes with U+FFFD);
// the caller writes nothing.
func marshal(v any, what string) (string, error) {
	switch x := v.(type) {
	case json.RawMessage:
		if x == nil {
			return "null", nil
		}
		return string(x), nil
	case nil:
		return "null", nil
	}
	b, err := jsonText(v)
	if err != nil {
		return "", encodeErr(what, err)
	}
	if err := checkUTF8(b, v, what); err != nil {
		return "", err
	}
	return string(b), nil
}

// jsonText is json.Marshal without its HTML escaping: json.Marshal writes <, > and &
// as \u003c, \u003e and \u0026, six bytes for one, so a payload (an e-mail's HTML
// body) was stored up to six times the size the other runtimes store for the same
// value, and one they take was refused as over the payload limit.
func jsonText(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return b[:len(b)-1], nil // Encode ends the text with a newline
}

// encodeErr is marshal's error: ErrInvalid for what, wrapping json's err.
func encodeErr(what string, err error) error {
	return &Error{Code: ErrInvalid, Op: what, Message: "cannot encode as JSON: " + err.Error(), cause: err}
}

// marshalOpt is marshal for an optional value: "" for nil.
func marshalOpt(v any, what string) (string, error) {
	if v == nil {
		return "", nil
	}
	if r, ok := v.(json.RawMessage); ok && r == nil {
		return "", nil
	}
	return marshal(v, what)
}

// Queue is a named queue on a DB or, from Tx.Queue, inside a transaction.
type Queue struct {
	c    *conn
	name string
}

// Queue names a queue. Names are checked by each call (ErrInvalid).
func (c *conn) Queue(name string) *Queue { return &Queue{c: c, name: name} }

// Name is the queue's name.
func (q *Queue) Name() string { return q.name }

// EnqueueOptions of Enqueue. The zero value is the default.
type EnqueueOptions struct {
	Priority    int64         // higher runs first
	Delay       time.Duration // claimable no sooner than now + Delay
	RunAt       time.Time     // absolute run time (instead of Delay)
	MaxAttempts int           // >= 1; 0: 3
	Expires     time.Duration // dead ("expired") if not claimed within this; 0: never
	UniqueKey   string        // dedup against live jobs of the queue
	Meta        any           // a JSON object of headers (map, struct or json.RawMessage)
}

// check refuses what the core would, naming the option (its messages name delay_ms...).
func (o *EnqueueOptions) check() error {
	if err := nonNeg("enqueue", "EnqueueOptions.Delay", o.Delay); err != nil {
		return err
	}
	if err := nonNeg("enqueue", "EnqueueOptions.Expires", o.Expires); err != nil {
		return err
	}
	if err := instant("enqueue", "EnqueueOptions.RunAt", o.RunAt); err != nil {
		return err
	}
	if o.Delay != 0 && !o.RunAt.IsZero() {
		return newErr(ErrInvalid, "enqueue", "give EnqueueOptions.Delay or RunAt, not both")
	}
	if o.MaxAttempts < 0 {
		return newErr(ErrInvalid, "enqueue", fmt.Sprintf("EnqueueOptions.MaxAttempts must be >= 1 (0: the default), not %d", o.MaxAttempts))
	}
	return nil
}

func (o *EnqueueOptions) fill(cs *cstrings, out *C.tocsin_enqueue_opts) error {
	out.version = C.TOCSIN_ENQUEUE_OPTS_VERSION
	if o == nil {
		return nil
	}
	if err := o.check(); err != nil {
		return err
	}
	ma, err := count("enqueue", "EnqueueOptions.MaxAttempts", o.MaxAttempts, C.TOCSIN_MAX_ATTEMPTS, "the default")
	if err != nil {
		return err
	}
	out.priority = C.int64_t(o.Priority)
	out.delay_ms = C.int64_t(ms(o.Delay))
	out.run_at_ms = C.int64_t(toMs(o.RunAt))
	out.max_attempts = ma
	out.expires_ms = C.int64_t(ms(o.Expires))
	out.unique_key = cs.opt(o.UniqueKey)
	meta, err := marshalOpt(o.Meta, "EnqueueOptions.Meta")
	if err != nil {
		return err
	}
	out.meta = cs.opt(meta)
	return nil
}

// Enqueue adds a job whose payload is v as JSON (a json.RawMessage is taken as is) and
// returns its id; with a UniqueKey that a live job holds, that job's id.
func (q *Queue) Enqueue(ctx context.Context, v any, opts *EnqueueOptions) (int64, error) {
	payload, err := marshal(v, "Enqueue payload")
	if err != nil {
		return 0, err
	}
	var cs cstrings
	defer cs.free()
	var o C.tocsin_enqueue_opts
	if err := opts.fill(&cs, &o); err != nil {
		return 0, err
	}
	cq, cp := cs.str(q.name), cs.str(payload)
	var id C.int64_t
	err = q.c.doCS(ctx, &cs, "enqueue", func(p *C.tocsin_db) C.int {
		return C.tocsin_queue_enqueue(p, &id, cq, cp, &o)
	})
	return int64(id), err
}

// JobSpec is one job of EnqueueMany.
type JobSpec struct {
	Queue   string // "": the queue EnqueueMany is called on
	Payload any
	Options *EnqueueOptions
}

// EnqueueMany adds the jobs atomically (all or none) and returns their ids in order
// (no jobs: an empty slice, nothing written).
func (q *Queue) EnqueueMany(ctx context.Context, jobs []JobSpec) ([]int64, error) {
	n := len(jobs)
	if n == 0 {
		// the core's answer to an empty batch (no arrays to pass: NULL, n 0)
		err := q.c.do(ctx, "enqueue_many", func(p *C.tocsin_db) C.int {
			return C.tocsin_queue_enqueue_many(p, nil, nil, 0)
		})
		if err != nil {
			return nil, err
		}
		return []int64{}, nil
	}
	var cs cstrings
	defer cs.free()
	specs := (*[1 << 28]C.tocsin_job_spec)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.tocsin_job_spec{}))))[:n:n]
	defer C.free(unsafe.Pointer(&specs[0]))
	optsArr := (*[1 << 28]C.tocsin_enqueue_opts)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.tocsin_enqueue_opts{}))))[:n:n]
	defer C.free(unsafe.Pointer(&optsArr[0]))
	for i, j := range jobs {
		payload, err := marshal(j.Payload, fmt.Sprintf("EnqueueMany payload of job %d", i))
		if err != nil {
			return nil, err
		}
		name := j.Queue
		if name == "" {
			name = q.name
		}
		if err := j.Options.fill(&cs, &optsArr[i]); err != nil {
			return nil, err
		}
		specs[i].queue = cs.str(name)
		specs[i].payload = cs.str(payload)
		specs[i].opts = &optsArr[i]
	}
	ids := make([]C.int64_t, n)
	err := q.c.doCS(ctx, &cs, "enqueue_many", func(p *C.tocsin_db) C.int {
		return C.tocsin_queue_enqueue_many(p, &ids[0], &specs[0], C.size_t(n))
	})
	if err != nil {
		return nil, err
	}
	out := make([]int64, n)
	for i := range ids {
		out[i] = int64(ids[i])
	}
	return out, nil
}

// DefaultVisibility is the lease of a claim when none is given.
const DefaultVisibility = 30 * time.Second

// Claim leases up to max claimable jobs (priority, then run time, then id) to worker
// for visibility (0: DefaultVisibility). An empty slice when nothing is claimable.
func (q *Queue) Claim(ctx context.Context, worker string, max int, visibility time.Duration) ([]Job, error) {
	if max < 1 || max > C.TOCSIN_MAX_BATCH {
		// (the core's message names the "claim count")
		return nil, newErr(ErrInvalid, "claim", fmt.Sprintf("max must be between 1 and %d, not %d", C.TOCSIN_MAX_BATCH, max))
	}
	if visibility == 0 {
		visibility = DefaultVisibility
	}
	if err := nonNeg("claim", "visibility", visibility); err != nil {
		return nil, err
	}
	var cs cstrings
	defer cs.free()
	cq, cw := cs.str(q.name), cs.str(worker)
	var jobs *C.tocsin_job
	var n C.size_t
	err := q.c.doCS(ctx, &cs, "claim", func(p *C.tocsin_db) C.int {
		return C.tocsin_queue_claim(p, &jobs, &n, cq, cw, C.size_t(max), C.int64_t(ms(visibility)))
	})
	if err != nil {
		return nil, err
	}
	return jobsFrom(jobs, n), nil
}

// ClaimOne claims one job; ErrNotFound when none is claimable.
func (q *Queue) ClaimOne(ctx context.Context, worker string, visibility time.Duration) (*Job, error) {
	jobs, err := q.Claim(ctx, worker, 1, visibility)
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, newErr(ErrNotFound, "claim", "no claimable job in queue "+q.name)
	}
	return &jobs[0], nil
}

func leaseErr(ok C.int, op string) error {
	if ok == 0 {
		return newErr(ErrLeaseLost, op, "the lease is no longer the caller's")
	}
	return nil
}

// Ack marks a leased job done (removed). ErrLeaseLost when token no longer holds the lease.
func (c *conn) Ack(ctx context.Context, id, token int64) error {
	var ok C.int
	if err := c.do(ctx, "ack", func(p *C.tocsin_db) C.int {
		return C.tocsin_job_ack(p, &ok, C.int64_t(id), C.int64_t(token))
	}); err != nil {
		return err
	}
	return leaseErr(ok, "ack")
}

// AckBatch acks (id, token) pairs in one transaction and counts those that held.
func (c *conn) AckBatch(ctx context.Context, jobs []Job) (int, error) {
	if len(jobs) == 0 {
		return 0, nil
	}
	ids := make([]C.int64_t, len(jobs))
	toks := make([]C.int64_t, len(jobs))
	for i := range jobs {
		ids[i], toks[i] = C.int64_t(jobs[i].ID), C.int64_t(jobs[i].Token)
	}
	var n C.size_t
	err := c.do(ctx, "ack_batch", func(p *C.tocsin_db) C.int {
		return C.tocsin_job_ack_batch(p, &n, &ids[0], &toks[0], C.size_t(len(jobs)))
	})
	return int(n), err
}

// Retry makes a leased job pending again after delay (< 0: the core's exponential
// backoff), or dead ("max_attempts") when its attempts are spent.
func (c *conn) Retry(ctx context.Context, id, token int64, delay time.Duration, errText string) error {
	var cs cstrings
	defer cs.free()
	ce := cs.opt(errText)
	d := int64(-1)
	if delay >= 0 {
		d = ms(delay)
	}
	var ok C.int
	if err := c.doCS(ctx, &cs, "retry", func(p *C.tocsin_db) C.int {
		return C.tocsin_job_retry(p, &ok, C.int64_t(id), C.int64_t(token), C.int64_t(d), ce)
	}); err != nil {
		return err
	}
	return leaseErr(ok, "retry")
}

// Fail kills a leased job now (reason "failed").
func (c *conn) Fail(ctx context.Context, id, token int64, errText string) error {
	var cs cstrings
	defer cs.free()
	ce := cs.opt(errText)
	var ok C.int
	if err := c.doCS(ctx, &cs, "fail", func(p *C.tocsin_db) C.int {
		return C.tocsin_job_fail(p, &ok, C.int64_t(id), C.int64_t(token), ce)
	}); err != nil {
		return err
	}
	return leaseErr(ok, "fail")
}

// Heartbeat extends a lease to now + extend.
func (c *conn) Heartbeat(ctx context.Context, id, token int64, extend time.Duration) error {
	if extend <= 0 {
		return newErr(ErrInvalid, "heartbeat", "extend must be > 0, not "+extend.String())
	}
	var ok C.int
	if err := c.do(ctx, "heartbeat", func(p *C.tocsin_db) C.int {
		return C.tocsin_job_heartbeat(p, &ok, C.int64_t(id), C.int64_t(token), C.int64_t(ms(extend)))
	}); err != nil {
		return err
	}
	return leaseErr(ok, "heartbeat")
}

// Complete saves value as the job's result (kept ttl; 0: forever) and acks it, atomically.
func (c *conn) Complete(ctx context.Context, id, token int64, value any, ttl time.Duration) error {
	if err := nonNeg("complete", "ttl", ttl); err != nil {
		return err
	}
	v, err := marshal(value, "Complete value")
	if err != nil {
		return err
	}
	var cs cstrings
	defer cs.free()
	cv := cs.str(v)
	var ok C.int
	if err := c.doCS(ctx, &cs, "complete", func(p *C.tocsin_db) C.int {
		return C.tocsin_job_complete(p, &ok, C.int64_t(id), C.int64_t(token), cv, C.int64_t(ms(ttl)))
	}); err != nil {
		return err
	}
	return leaseErr(ok, "complete")
}

// FailTask records a task error (type, message) as the job's result (kept ttl; 0:
// forever) and fails the job.
func (c *conn) FailTask(ctx context.Context, id, token int64, errType, message string, ttl time.Duration) error {
	if err := nonNeg("fail_task", "ttl", ttl); err != nil {
		return err
	}
	var cs cstrings
	defer cs.free()
	ct, cm := cs.str(errType), cs.str(message)
	var ok C.int
	if err := c.doCS(ctx, &cs, "fail_task", func(p *C.tocsin_db) C.int {
		return C.tocsin_job_fail_task(p, &ok, C.int64_t(id), C.int64_t(token), ct, cm, C.int64_t(ms(ttl)))
	}); err != nil {
		return err
	}
	return leaseErr(ok, "fail_task")
}

// Cancel kills a live job (reason "cancelled"); ErrNotFound if no live job has that id.
func (c *conn) Cancel(ctx context.Context, id int64) error {
	var ok C.int
	if err := c.do(ctx, "cancel", func(p *C.tocsin_db) C.int { return C.tocsin_job_cancel(p, &ok, C.int64_t(id)) }); err != nil {
		return err
	}
	if ok == 0 {
		return newErr(ErrNotFound, "cancel", "no live job has that id")
	}
	return nil
}

// Job looks a job up, live or dead; ErrNotFound when none has that id (acked jobs are removed).
func (c *conn) Job(ctx context.Context, id int64) (*Job, error) {
	var j *C.tocsin_job
	if err := c.do(ctx, "job", func(p *C.tocsin_db) C.int { return C.tocsin_job_get(p, &j, C.int64_t(id)) }); err != nil {
		return nil, err
	}
	if j == nil {
		return nil, newErr(ErrNotFound, "job", "no job has that id")
	}
	out := jobFrom(j)
	C.tocsin_jobs_free(j, 1)
	return &out, nil
}

// nilJob refuses a nil *Job (ErrInvalid naming the argument), before anything runs.
func nilJob(op string, j *Job) error {
	if j == nil {
		return newErr(ErrInvalid, op, "job must not be nil (pass the *Job that Claim or ClaimOne returned)")
	}
	return nil
}

// Ack, Retry, Fail and Heartbeat of a claimed job, on its queue's handle (a nil job is
// ErrInvalid).
func (q *Queue) Ack(ctx context.Context, j *Job) error {
	if err := nilJob("ack", j); err != nil {
		return err
	}
	return q.c.Ack(ctx, j.ID, j.Token)
}
func (q *Queue) Retry(ctx context.Context, j *Job, delay time.Duration, errText string) error {
	if err := nilJob("retry", j); err != nil {
		return err
	}
	return q.c.Retry(ctx, j.ID, j.Token, delay, errText)
}
func (q *Queue) Fail(ctx context.Context, j *Job, errText string) error {
	if err := nilJob("fail", j); err != nil {
		return err
	}
	return q.c.Fail(ctx, j.ID, j.Token, errText)
}
func (q *Queue) Heartbeat(ctx context.Context, j *Job, extend time.Duration) error {
	if err := nilJob("heartbeat", j); err != nil {
		return err
	}
	return q.c.Heartbeat(ctx, j.ID, j.Token, extend)
}

// Get looks up a job by id (ErrNotFound when none); Cancel cancels it.
func (q *Queue) Get(ctx context.Context, id int64) (*Job, error) { return q.c.Job(ctx, id) }
func (q *Queue) Cancel(ctx context.Context, id int64) error      { return q.c.Cancel(ctx, id) }

// Pause stops the queue handing out jobs (enqueue still works); Resume restarts it.
func (q *Queue) Pause(ctx context.Context) error {
	var cs cstrings
	defer cs.free()
	cq := cs.str(q.name)
	return q.c.doCS(ctx, &cs, "pause", func(p *C.tocsin_db) C.int { return C.tocsin_queue_pause(p, cq) })
}

func (q *Queue) Resume(ctx context.Context) error {
	var cs cstrings
	defer cs.free()
	cq := cs.str(q.name)
	return q.c.doCS(ctx, &cs, "resume", func(p *C.tocsin_db) C.int { return C.tocsin_queue_resume(p, cq) })
}

// Paused tells whether the queue is paused.
func (q *Queue) Paused(ctx context.Context) (bool, error) {
	var cs cstrings
	defer cs.free()
	cq := cs.str(q.name)
	var v C.int
	err := q.c.doCS(ctx, &cs, "is_paused", func(p *C.tocsin_db) C.int { return C.tocsin_queue_is_paused(p, &v, cq) })
	return v != 0, err
}

// QueueStats are a queue's counts (tocsin_queue_stats).
type QueueStats struct {
	Queue              string `json:"queue"`
	Pending            int64  `json:"pending"`
	Scheduled          int64  `json:"scheduled"`
	Processing         int64  `json:"processing"`
	Dead               int64  `json:"dead"`
	OldestPendingAgeMs int64  `json:"oldest_pending_age_ms"`
	Paused             bool   `json:"paused"`
}

func (c *conn) statsJSON(ctx context.Context, queue *C.char) (string, error) {
	var out *C.char
	err := c.do(ctx, "stats", func(p *C.tocsin_db) C.int { return C.tocsin_queue_stats(p, &out, queue) })
	if err != nil {
		return "", err
	}
	s := C.GoString(out)
	C.tocsin_free(unsafe.Pointer(out))
	return s, nil
}

// Stats of the queue.
func (q *Queue) Stats(ctx context.Context) (QueueStats, error) {
	var cs cstrings
	defer cs.free()
	var st QueueStats
	cq := cs.str(q.name)
	if err := cs.check("stats"); err != nil {
		return st, err
	}
	s, err := q.c.statsJSON(ctx, cq)
	if err != nil {
		return st, err
	}
	err = json.Unmarshal([]byte(s), &st)
	return st, err
}

// Stats of every queue.
func (c *conn) Stats(ctx context.Context) ([]QueueStats, error) {
	s, err := c.statsJSON(ctx, nil)
	if err != nil {
		return nil, err
	}
	var all struct {
		Queues []QueueStats `json:"queues"`
	}
	err = json.Unmarshal([]byte(s), &all)
	return all.Queues, err
}

// NextDeadline is when something in the queue next needs a worker; ok false when
// nothing is pending or in flight.
func (q *Queue) NextDeadline(ctx context.Context) (t time.Time, ok bool, err error) {
	var cs cstrings
	defer cs.free()
	arr := []*C.char{cs.str(q.name)}
	carr := (**C.char)(C.malloc(C.size_t(unsafe.Sizeof(arr[0]))))
	defer C.free(unsafe.Pointer(carr))
	*carr = arr[0]
	var v C.int64_t
	err = q.c.doCS(ctx, &cs, "next_deadline", func(p *C.tocsin_db) C.int {
		return C.tocsin_queue_next_deadline(p, &v, carr, 1)
	})
	if err != nil || v < 0 {
		return time.Time{}, false, err
	}
	return fromMs(int64(v)), true, nil
}

// DeadLetters lists dead jobs of the queue with id > afterID, oldest first (limit 0: 100).
func (q *Queue) DeadLetters(ctx context.Context, afterID int64, limit int) ([]Job, error) {
	var cs cstrings
	defer cs.free()
	cq := cs.str(q.name)
	if err := cs.check("dead_list"); err != nil {
		return nil, err
	}
	return q.c.deadList(ctx, cq, afterID, limit)
}

// DeadLetters of every queue.
func (c *conn) DeadLetters(ctx context.Context, afterID int64, limit int) ([]Job, error) {
	return c.deadList(ctx, nil, afterID, limit)
}

func (c *conn) deadList(ctx context.Context, queue *C.char, afterID int64, limit int) ([]Job, error) {
	if limit == 0 {
		limit = 100
	}
	if limit < 0 {
		return nil, newErr(ErrInvalid, "dead_list", "limit must be >= 1")
	}
	var jobs *C.tocsin_job
	var n C.size_t
	err := c.do(ctx, "dead_list", func(p *C.tocsin_db) C.int {
		return C.tocsin_dead_list(p, &jobs, &n, queue, C.int64_t(afterID), C.size_t(limit))
	})
	if err != nil {
		return nil, err
	}
	return jobsFrom(jobs, n), nil
}

// Requeue moves dead job id back to pending (same id, MaxAttempts more attempts; the attempt count goes on, so tokens never repeat); ErrNotFound if it is not dead.
func (c *conn) Requeue(ctx context.Context, id int64) error {
	var ok C.int
	if err := c.do(ctx, "dead_requeue", func(p *C.tocsin_db) C.int { return C.tocsin_dead_requeue(p, &ok, C.int64_t(id)) }); err != nil {
		return err
	}
	if ok == 0 {
		return newErr(ErrNotFound, "dead_requeue", "no dead job has that id")
	}
	return nil
}

// Requeue a dead job of any queue.
func (q *Queue) Requeue(ctx context.Context, id int64) error { return q.c.Requeue(ctx, id) }

// Purge deletes the queue's dead jobs that died before `before` (zero: all of them).
func (q *Queue) Purge(ctx context.Context, before time.Time) (int64, error) {
	if err := instant("dead_purge", "before", before); err != nil {
		return 0, err
	}
	var cs cstrings
	defer cs.free()
	cq := cs.str(q.name)
	var n C.int64_t
	err := q.c.doCS(ctx, &cs, "dead_purge", func(p *C.tocsin_db) C.int {
		return C.tocsin_dead_purge(p, &n, cq, C.int64_t(toMs(before)))
	})
	return int64(n), err
}
