package tocsin

/*
#include <stdlib.h>
#include "tocsin.h"

static tocsin_schedule *go_sched_at(tocsin_schedule *s, size_t i) { return &s[i]; }
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unsafe"
)

// ---- results ----

// TaskError is a task's failure recorded as data (any runtime reads the same type and
// message). A job that died without a result reads as Type "JobDead".
type TaskError struct {
	JobID   int64
	Type    string
	Message string
	Trace   string
}

func (e *TaskError) Error() string {
	if e.Message == "" {
		return "task failed: " + e.Type
	}
	return "task failed: " + e.Type + ": " + e.Message
}

// Result is a job's outcome: a JSON value, or Err.
type Result struct {
	JobID     int64
	Value     json.RawMessage // nil when Err is set; "null" for a stored JSON null
	Err       *TaskError
	CreatedAt time.Time
	ExpiresAt time.Time // zero: never
}

// Decode unmarshals the value into v, or returns the task's error.
func (r *Result) Decode(v any) error {
	if r.Err != nil {
		return r.Err
	}
	return json.Unmarshal(r.Value, v)
}

func resultFrom(r *C.tocsin_result) *Result {
	out := &Result{JobID: int64(r.job_id), CreatedAt: fromMs(int64(r.created_at)), ExpiresAt: fromMs(int64(r.expires_at))}
	if r.is_error != 0 {
		out.Err = &TaskError{JobID: out.JobID, Type: goStr(r.error_type), Message: goStr(r.error_message), Trace: goStr(r.error_trace)}
	} else {
		out.Value = raw(r.value)
	}
	C.tocsin_result_free(r)
	return out
}

// SaveResult stores v as job's result, kept ttl (0: forever).
func (c *conn) SaveResult(ctx context.Context, jobID int64, v any, ttl time.Duration) error {
	if err := nonNeg("result_save", "ttl", ttl); err != nil {
		return err
	}
	val, err := marshal(v, "SaveResult value")
	if err != nil {
		return err
	}
	var cs cstrings
	defer cs.free()
	cv := cs.str(val)
	return c.doCS(ctx, &cs, "result_save", func(p *C.tocsin_db) C.int {
		return C.tocsin_result_save(p, C.int64_t(jobID), cv, C.int64_t(ms(ttl)))
	})
}

// SaveError records a task error as job's result, kept ttl (0: forever).
func (c *conn) SaveError(ctx context.Context, jobID int64, errType, message string, ttl time.Duration) error {
	if err := nonNeg("result_save_error", "ttl", ttl); err != nil {
		return err
	}
	var cs cstrings
	defer cs.free()
	ct, cm := cs.str(errType), cs.str(message)
	return c.doCS(ctx, &cs, "result_save_error", func(p *C.tocsin_db) C.int {
		return C.tocsin_result_save_error(p, C.int64_t(jobID), ct, cm, C.int64_t(ms(ttl)))
	})
}

// Result reads job's result; ErrNotFound when there is none (yet, or expired).
func (c *conn) Result(ctx context.Context, jobID int64) (*Result, error) {
	var r *C.tocsin_result
	if err := c.do(ctx, "result_get", func(p *C.tocsin_db) C.int { return C.tocsin_result_get(p, &r, C.int64_t(jobID)) }); err != nil {
		return nil, err
	}
	if r == nil {
		return nil, newErr(ErrNotFound, "result_get", "no result for that job")
	}
	return resultFrom(r), nil
}

// WaitResult blocks until job has an outcome (a result, or a JobDead error for a job
// that died without one), ctx ends or the DB closes. ErrNotFound when neither a job
// nor a result has that id. At ctx's deadline the error (ErrTimeout, matching
// context.DeadlineExceeded) says why: the job was never claimed, is running, or is
// retrying.
func (db *DB) WaitResult(ctx context.Context, jobID int64) (*Result, error) {
	var r *C.tocsin_result
	err := db.blockingWait(ctx, "result_wait", func(p *C.tocsin_db, dl C.int64_t, sub *C.tocsin_sub) C.int {
		return C.tocsin_result_wait(p, &r, C.int64_t(jobID), dl, sub)
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return db.resultAtDeadline(jobID, err)
		}
		return nil, err
	}
	return resultFrom(r), nil
}

// resultAtDeadline is the core's last check once the wait's deadline has passed: the
// outcome if it landed meanwhile, else the core's timeout, which says what the job is
// doing (werr if the check cannot run).
func (db *DB) resultAtDeadline(jobID int64, werr error) (*Result, error) {
	p, release, err := db.acquire("result_wait")
	if err != nil {
		return nil, werr
	}
	defer release()
	var r *C.tocsin_result
	err = call("result_wait", func() C.int { return C.tocsin_result_wait(p, &r, C.int64_t(jobID), 0, nil) })
	if err == nil {
		return resultFrom(r), nil
	}
	var te *Error
	if errors.As(err, &te) && te.Code == ErrTimeout {
		return nil, &Error{Code: ErrTimeout, Op: "result_wait", cause: context.DeadlineExceeded,
			Message: fmt.Sprintf("no result for job %d by the context's deadline: %s", jobID, te.Message)}
	}
	return nil, werr
}

// DeleteResult deletes job's result; ErrNotFound if there was none.
func (c *conn) DeleteResult(ctx context.Context, jobID int64) error {
	var ok C.int
	if err := c.do(ctx, "result_delete", func(p *C.tocsin_db) C.int { return C.tocsin_result_delete(p, &ok, C.int64_t(jobID)) }); err != nil {
		return err
	}
	if ok == 0 {
		return newErr(ErrNotFound, "result_delete", "no result for that job")
	}
	return nil
}

// ---- locks ----

// Lock is a named TTL lease with a fencing token, held by Owner. Not for concurrent use
// by several goroutines (give each its own Lock value).
type Lock struct {
	db    *DB
	Name  string
	Owner string
	TTL   time.Duration
	token int64
	until time.Time
}

// Lock names a lock held by owner for ttl at a time.
func (db *DB) Lock(name, owner string, ttl time.Duration) *Lock {
	return &Lock{db: db, Name: name, Owner: owner, TTL: ttl}
}

// Token is the fencing token of the current holding (0 when not held).
func (l *Lock) Token() int64 { return l.token }

// Until is when the current holding ends.
func (l *Lock) Until() time.Time { return l.until }

// TryAcquire takes the lock if it is free (or ours: then extended); false when another
// owner holds it.
func (l *Lock) TryAcquire(ctx context.Context) (bool, error) {
	if err := lease("lock_acquire", "Lock.TTL", l.TTL); err != nil {
		return false, err
	}
	var cs cstrings
	defer cs.free()
	cn, co := cs.str(l.Name), cs.str(l.Owner)
	var tok, until C.int64_t
	if err := l.db.doCS(ctx, &cs, "lock_acquire", func(p *C.tocsin_db) C.int {
		return C.tocsin_lock_acquire(p, &tok, &until, cn, co, C.int64_t(ms(l.TTL)))
	}); err != nil {
		return false, err
	}
	if tok == 0 {
		return false, nil
	}
	l.token, l.until = int64(tok), fromMs(int64(until))
	return true, nil
}

// Acquire waits until the lock is ours (tocsin_lock_wait: reads only while another
// holds it), or ctx ends, or the DB closes.
func (l *Lock) Acquire(ctx context.Context) error {
	if err := lease("lock_wait", "Lock.TTL", l.TTL); err != nil {
		return err
	}
	var cs cstrings
	defer cs.free()
	cn, co := cs.str(l.Name), cs.str(l.Owner)
	if err := cs.check("lock_wait"); err != nil {
		return err
	}
	var tok, until C.int64_t
	err := l.db.blockingWait(ctx, "lock_wait", func(p *C.tocsin_db, dl C.int64_t, sub *C.tocsin_sub) C.int {
		return C.tocsin_lock_wait(p, &tok, &until, cn, co, C.int64_t(ms(l.TTL)), dl, sub)
	})
	if err != nil {
		return err
	}
	l.token, l.until = int64(tok), fromMs(int64(until))
	return nil
}

// Renew extends the holding to now + TTL; ErrLeaseLost when it was taken over.
func (l *Lock) Renew(ctx context.Context) error {
	if l.token == 0 {
		return newErr(ErrLeaseLost, "lock_renew", "the lock is not held by this Lock")
	}
	if err := lease("lock_renew", "Lock.TTL", l.TTL); err != nil {
		return err
	}
	var cs cstrings
	defer cs.free()
	cn, co := cs.str(l.Name), cs.str(l.Owner)
	var ok C.int
	if err := l.db.doCS(ctx, &cs, "lock_renew", func(p *C.tocsin_db) C.int {
		return C.tocsin_lock_renew(p, &ok, cn, co, C.int64_t(l.token), C.int64_t(ms(l.TTL)))
	}); err != nil {
		return err
	}
	return leaseErr(ok, "lock_renew")
}

// Release frees the lock; ErrLeaseLost when this holding no longer held it.
func (l *Lock) Release(ctx context.Context) error {
	if l.token == 0 {
		return newErr(ErrLeaseLost, "lock_release", "the lock is not held by this Lock")
	}
	var cs cstrings
	defer cs.free()
	cn, co := cs.str(l.Name), cs.str(l.Owner)
	var ok C.int
	if err := l.db.doCS(ctx, &cs, "lock_release", func(p *C.tocsin_db) C.int {
		return C.tocsin_lock_release(p, &ok, cn, co, C.int64_t(l.token))
	}); err != nil {
		return err // still held: Release can be called again
	}
	l.token = 0
	return leaseErr(ok, "lock_release")
}

// LockHolder is who holds name ("" when free), its token and lease end.
func (c *conn) LockHolder(ctx context.Context, name string) (owner string, token int64, until time.Time, err error) {
	var cs cstrings
	defer cs.free()
	cn := cs.str(name)
	var co *C.char
	var tok, u C.int64_t
	err = c.doCS(ctx, &cs, "lock_holder", func(p *C.tocsin_db) C.int { return C.tocsin_lock_holder(p, &co, &tok, &u, cn) })
	if err != nil {
		return "", 0, time.Time{}, err
	}
	owner = goStr(co)
	C.tocsin_free(unsafe.Pointer(co))
	return owner, int64(tok), fromMs(int64(u)), nil
}

// ---- rate limits ----

// RateLimit admits at most Limit calls of Name in any window of Per (sliding log).
type RateLimit struct {
	c     *conn
	Name  string
	Limit int64
	Per   time.Duration
}

// RateLimit names a limit. Use one (limit, per) per name.
func (c *conn) RateLimit(name string, limit int64, per time.Duration) *RateLimit {
	return &RateLimit{c: c, Name: name, Limit: limit, Per: per}
}

// RateDecision is the answer of Try.
type RateDecision struct {
	Allowed    bool
	RetryAfter time.Duration // 0 when allowed
	Remaining  int64         // calls still admissible right now
}

// Try asks for one admission.
func (r *RateLimit) Try(ctx context.Context) (RateDecision, error) {
	if err := lease("ratelimit_try", "RateLimit.Per", r.Per); err != nil {
		return RateDecision{}, err
	}
	var cs cstrings
	defer cs.free()
	cn := cs.str(r.Name)
	var allowed C.int
	var retry, rem C.int64_t
	err := r.c.doCS(ctx, &cs, "ratelimit_try", func(p *C.tocsin_db) C.int {
		return C.tocsin_ratelimit_try(p, &allowed, &retry, &rem, cn, C.int64_t(r.Limit), C.int64_t(ms(r.Per)))
	})
	return RateDecision{Allowed: allowed != 0, RetryAfter: time.Duration(retry) * time.Millisecond, Remaining: int64(rem)}, err
}

// Reset forgets every admission of the limit.
func (r *RateLimit) Reset(ctx context.Context) (int64, error) {
	var cs cstrings
	defer cs.free()
	cn := cs.str(r.Name)
	var n C.int64_t
	err := r.c.doCS(ctx, &cs, "ratelimit_reset", func(p *C.tocsin_db) C.int { return C.tocsin_ratelimit_reset(p, &n, cn) })
	return int64(n), err
}

// ---- prune ----

// PruneOptions of Prune. Notifications are pruned only when a criterion is set.
type PruneOptions struct {
	NotificationsMaxAge  time.Duration
	NotificationsMaxKeep int64
}

// Pruned counts what Prune deleted.
type Pruned struct {
	Results, RateLimits, Notifications int64
}

// Prune deletes expired results and stale rate-limit admissions, and prunes
// notifications by the options.
func (c *conn) Prune(ctx context.Context, opts PruneOptions) (Pruned, error) {
	var out Pruned
	// refused before anything is deleted, naming the option (not PruneNotifications' arguments)
	if err := nonNeg("prune", "PruneOptions.NotificationsMaxAge", opts.NotificationsMaxAge); err != nil {
		return out, err
	}
	if opts.NotificationsMaxKeep < 0 {
		return out, newErr(ErrInvalid, "prune", fmt.Sprintf("PruneOptions.NotificationsMaxKeep must be >= 0, not %d",
			opts.NotificationsMaxKeep))
	}
	var a, b C.int64_t
	if err := c.do(ctx, "result_sweep", func(p *C.tocsin_db) C.int { return C.tocsin_result_sweep(p, &a) }); err != nil {
		return out, err
	}
	if err := c.do(ctx, "ratelimit_sweep", func(p *C.tocsin_db) C.int { return C.tocsin_ratelimit_sweep(p, &b) }); err != nil {
		return out, err
	}
	out.Results, out.RateLimits = int64(a), int64(b)
	if opts.NotificationsMaxAge > 0 || opts.NotificationsMaxKeep > 0 {
		n, err := c.PruneNotifications(ctx, opts.NotificationsMaxAge, opts.NotificationsMaxKeep)
		out.Notifications = n
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// ---- schedules ----

// ScheduleOptions of SetSchedule.
type ScheduleOptions struct {
	Priority    int64
	MaxAttempts int           // 0: 3
	JobExpires  time.Duration // fired jobs expire if unclaimed this long; 0: never
	CatchUpAll  bool          // one job per missed boundary (up to MaxCatchUp) instead of one for all
	MaxCatchUp  int           // 0: 100
	LocalTime   bool          // the expression is in the process's local time (else UTC)
	Meta        any           // JSON object copied into the fired jobs' meta
}

func (o *ScheduleOptions) fill(cs *cstrings, out *C.tocsin_schedule_opts) error {
	out.version = C.TOCSIN_SCHEDULE_OPTS_VERSION
	if o == nil {
		return nil
	}
	if err := nonNeg("schedule_set", "ScheduleOptions.JobExpires", o.JobExpires); err != nil {
		return err
	}
	ma, err := count("schedule_set", "ScheduleOptions.MaxAttempts", o.MaxAttempts, C.TOCSIN_MAX_ATTEMPTS, "the default")
	if err != nil {
		return err
	}
	mc, err := count("schedule_set", "ScheduleOptions.MaxCatchUp", o.MaxCatchUp, C.TOCSIN_MAX_CATCH_UP, "the default")
	if err != nil {
		return err
	}
	out.priority = C.int64_t(o.Priority)
	out.max_attempts = ma
	out.job_expires_ms = C.int64_t(ms(o.JobExpires))
	if o.CatchUpAll {
		out.catch_up = C.TOCSIN_CATCHUP_ALL
	}
	out.max_catch_up = mc
	if o.LocalTime {
		out.local_time = 1
	}
	m, err := marshalOpt(o.Meta, "ScheduleOptions.Meta")
	if err != nil {
		return err
	}
	out.meta = cs.opt(m)
	return nil
}

// Schedule is a cron schedule as stored.
type Schedule struct {
	Name, Cron, Queue string
	Payload, Meta     json.RawMessage
	Priority          int64
	MaxAttempts       int
	JobExpires        time.Duration
	CatchUpAll        bool
	MaxCatchUp        int
	LocalTime, Paused bool
	NextFire          time.Time // zero: never fires again
	LastFire          time.Time
	LastJobID         int64
	FiredCount        int64
	SkippedCount      int64
	CreatedAt         time.Time
	UpdatedAt         time.Time
}

func schedulesFrom(s *C.tocsin_schedule, n C.size_t) []Schedule {
	out := make([]Schedule, int(n))
	for i := range out {
		x := C.go_sched_at(s, C.size_t(i))
		out[i] = Schedule{Name: goStr(x.name), Cron: goStr(x.cron), Queue: goStr(x.queue),
			Payload: raw(x.payload), Meta: raw(x.meta), Priority: int64(x.priority),
			MaxAttempts: int(x.max_attempts), JobExpires: time.Duration(x.job_expires_ms) * time.Millisecond,
			CatchUpAll: x.catch_up == C.TOCSIN_CATCHUP_ALL, MaxCatchUp: int(x.max_catch_up),
			LocalTime: x.local_time != 0, Paused: x.paused != 0, NextFire: fromMs(int64(x.next_fire)),
			LastFire: fromMs(int64(x.last_fire)), LastJobID: int64(x.last_job_id),
			FiredCount: int64(x.fired_count), SkippedCount: int64(x.skipped_count),
			CreatedAt: fromMs(int64(x.created_at)), UpdatedAt: fromMs(int64(x.updated_at))}
	}
	C.tocsin_schedules_free(s, n)
	return out
}

// SetSchedule registers (inserts or replaces) schedule name: every boundary of cron
// enqueues v on queue. It returns the next boundary.
func (c *conn) SetSchedule(ctx context.Context, name, cron, queue string, v any, opts *ScheduleOptions) (time.Time, error) {
	payload, err := marshal(v, "SetSchedule payload")
	if err != nil {
		return time.Time{}, err
	}
	var cs cstrings
	defer cs.free()
	var o C.tocsin_schedule_opts
	if err := opts.fill(&cs, &o); err != nil {
		return time.Time{}, err
	}
	cn, cc, cq, cp := cs.str(name), cs.str(cron), cs.str(queue), cs.str(payload)
	var next C.int64_t
	err = c.doCS(ctx, &cs, "schedule_set", func(p *C.tocsin_db) C.int {
		return C.tocsin_schedule_set(p, &next, cn, cc, cq, cp, &o)
	})
	return fromMs(int64(next)), err
}

// PauseSchedule and ResumeSchedule (ErrNotFound when there is no such schedule).
func (c *conn) PauseSchedule(ctx context.Context, name string) error {
	var cs cstrings
	defer cs.free()
	cn := cs.str(name)
	return c.doCS(ctx, &cs, "schedule_pause", func(p *C.tocsin_db) C.int { return C.tocsin_schedule_pause(p, cn) })
}

func (c *conn) ResumeSchedule(ctx context.Context, name string) error {
	var cs cstrings
	defer cs.free()
	cn := cs.str(name)
	return c.doCS(ctx, &cs, "schedule_resume", func(p *C.tocsin_db) C.int { return C.tocsin_schedule_resume(p, cn) })
}

// RemoveSchedule deletes a schedule; ErrNotFound if there was none.
func (c *conn) RemoveSchedule(ctx context.Context, name string) error {
	var cs cstrings
	defer cs.free()
	cn := cs.str(name)
	var ok C.int
	if err := c.doCS(ctx, &cs, "schedule_remove", func(p *C.tocsin_db) C.int { return C.tocsin_schedule_remove(p, &ok, cn) }); err != nil {
		return err
	}
	if ok == 0 {
		return newErr(ErrNotFound, "schedule_remove", "no such schedule")
	}
	return nil
}

// GetSchedule reads one schedule; ErrNotFound if there is none.
func (c *conn) GetSchedule(ctx context.Context, name string) (*Schedule, error) {
	var cs cstrings
	defer cs.free()
	cn := cs.str(name)
	var s *C.tocsin_schedule
	if err := c.doCS(ctx, &cs, "schedule_get", func(p *C.tocsin_db) C.int { return C.tocsin_schedule_get(p, &s, cn) }); err != nil {
		return nil, err
	}
	if s == nil {
		return nil, newErr(ErrNotFound, "schedule_get", "no such schedule")
	}
	return &schedulesFrom(s, 1)[0], nil
}

// Schedules lists every schedule by name.
func (c *conn) Schedules(ctx context.Context) ([]Schedule, error) {
	var s *C.tocsin_schedule
	var n C.size_t
	if err := c.do(ctx, "schedule_list", func(p *C.tocsin_db) C.int { return C.tocsin_schedule_list(p, &s, &n) }); err != nil {
		return nil, err
	}
	return schedulesFrom(s, n), nil
}

// SchedulerTick fires every due boundary exactly once across processes; it counts the jobs.
func (c *conn) SchedulerTick(ctx context.Context) (int64, error) {
	var n C.int64_t
	err := c.do(ctx, "scheduler_tick", func(p *C.tocsin_db) C.int { return C.tocsin_scheduler_tick(p, &n) })
	return int64(n), err
}

// SchedulerNextFire is the earliest next boundary of the unpaused schedules (ok false: none).
func (c *conn) SchedulerNextFire(ctx context.Context) (time.Time, bool, error) {
	var v C.int64_t
	err := c.do(ctx, "scheduler_next_fire", func(p *C.tocsin_db) C.int { return C.tocsin_scheduler_next_fire(p, &v) })
	if err != nil || v < 0 {
		return time.Time{}, false, err
	}
	return fromMs(int64(v)), true, nil
}

// CronNext is the first fire time of expr strictly after `after` (ok false: none before
// year 10000). ErrInvalid names the bad field.
func CronNext(expr string, after time.Time, localTime bool) (time.Time, bool, error) {
	var cs cstrings
	defer cs.free()
	ce := cs.str(expr)
	if err := cs.check("cron_parse"); err != nil {
		return time.Time{}, false, err
	}
	errbuf := (*C.char)(C.calloc(256, 1))
	defer C.free(unsafe.Pointer(errbuf))
	var cr *C.tocsin_cron
	if rc := C.tocsin_cron_parse(&cr, ce, errbuf, 256); rc != 0 {
		return time.Time{}, false, newErr(Code(rc), "cron_parse", C.GoString(errbuf))
	}
	defer C.tocsin_cron_free(cr)
	lt := C.int(0)
	if localTime {
		lt = 1
	}
	am := after.UnixMilli()
	if am < 0 || am > maxTimeMs {
		return time.Time{}, false, newErr(ErrInvalid, "cron_next", "after must be between the Unix epoch and the year 9999, not "+after.String())
	}
	var next C.int64_t
	rc := C.tocsin_cron_next(&next, cr, C.int64_t(am), lt)
	if rc == C.TOCSIN_NOTFOUND {
		return time.Time{}, false, nil
	}
	if rc != 0 {
		return time.Time{}, false, newErr(Code(rc), "cron_next", "")
	}
	return fromMs(int64(next)), true, nil
}
