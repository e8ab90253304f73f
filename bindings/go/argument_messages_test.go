package tocsin_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

// A duration or instant the core would refuse is refused by the binding, the error
// naming the Go option or argument in Go's units (the core's messages name its C
// argument, delay_ms, in ms); nothing is written.
func TestArgumentMessagesNameTheGoOption(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	q := db.Queue("q")
	if _, err := q.Enqueue(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	j, err := q.ClaimOne(ctx, "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	before := time.Unix(-5, 0)
	day := 24 * time.Hour
	cases := []struct {
		want string
		call func() error
	}{
		{"enqueue: EnqueueOptions.Delay must be >= 0, not -1s", func() error {
			_, e := q.Enqueue(ctx, 1, &tocsin.EnqueueOptions{Delay: -time.Second})
			return e
		}},
		{"enqueue: EnqueueOptions.Expires must be >= 0, not -1s", func() error {
			_, e := q.Enqueue(ctx, 1, &tocsin.EnqueueOptions{Expires: -time.Second})
			return e
		}},
		{"enqueue: EnqueueOptions.RunAt must be after the Unix epoch and at most 9999-12-31T23:59:59.999Z, not 10000-01-01", func() error {
			_, e := q.Enqueue(ctx, 1, &tocsin.EnqueueOptions{RunAt: far})
			return e
		}},
		{"EnqueueOptions.RunAt must be after the Unix epoch", func() error {
			_, e := q.Enqueue(ctx, 1, &tocsin.EnqueueOptions{RunAt: before})
			return e
		}},
		{"enqueue: give EnqueueOptions.Delay or RunAt, not both", func() error {
			_, e := q.Enqueue(ctx, 1, &tocsin.EnqueueOptions{Delay: time.Second, RunAt: time.Now()})
			return e
		}},
		{"EnqueueOptions.RunAt must be after", func() error {
			_, e := q.EnqueueMany(ctx, []tocsin.JobSpec{{Payload: 1}, {Payload: 2, Options: &tocsin.EnqueueOptions{RunAt: far}}})
			return e
		}},
		{"claim: visibility must be >= 0, not -1s", func() error { _, e := q.Claim(ctx, "w", 1, -time.Second); return e }},
		{"heartbeat: extend must be > 0, not 0s", func() error { return q.Heartbeat(ctx, j, 0) }},
		{"dead_purge: before must be after the Unix epoch", func() error { _, e := q.Purge(ctx, far); return e }},
		{"stream_trim: trim needs TrimOptions.MaxAge, MaxCount or BelowConsumers", func() error {
			_, e := db.Stream("t").Trim(ctx, tocsin.TrimOptions{})
			return e
		}},
		{"stream_trim: TrimOptions.MaxAge must be >= 0, not -1s", func() error {
			_, e := db.Stream("t").Trim(ctx, tocsin.TrimOptions{MaxAge: -time.Second})
			return e
		}},
		{"stream_trim: TrimOptions.MaxCount must be >= 0, not -1", func() error {
			_, e := db.Stream("t").Trim(ctx, tocsin.TrimOptions{MaxCount: -1})
			return e
		}},
		{"notify_prune: maxAge must be >= 0, not -1s", func() error { _, e := db.PruneNotifications(ctx, -time.Second, 0); return e }},
		{"notify_prune: maxKeep must be >= 0, not -1", func() error { _, e := db.PruneNotifications(ctx, 0, -1); return e }},
		{"notify_autotrim: auto-trim needs maxAge or maxKeep (oneIn 0 turns it off)", func() error {
			return db.SetNotifyAutotrim(ctx, 0, 0, 10)
		}},
		{"notify_autotrim: maxAge must be >= 0, not -1s", func() error { return db.SetNotifyAutotrim(ctx, -time.Second, 0, 10) }},
		{"notify_autotrim: maxKeep and oneIn must be >= 0", func() error { return db.SetNotifyAutotrim(ctx, 0, 1, -1) }},
		{"result_save: ttl must be >= 0, not -1s", func() error { return db.SaveResult(ctx, j.ID, 1, -time.Second) }},
		{"result_save_error: ttl must be >= 0", func() error { return db.SaveError(ctx, j.ID, "T", "m", -time.Second) }},
		{"complete: ttl must be >= 0", func() error { return db.Complete(ctx, j.ID, j.Token, 1, -time.Second) }},
		{"lock_acquire: Lock.TTL must be > 0 and at most 8784h0m0s (366 days), not 9600h0m0s", func() error {
			_, e := db.Lock("l", "o", 400*day).TryAcquire(ctx)
			return e
		}},
		{"lock_acquire: Lock.TTL must be > 0", func() error { _, e := db.Lock("l", "o", 0).TryAcquire(ctx); return e }},
		{"lock_wait: Lock.TTL must be > 0", func() error { return db.Lock("l", "o", -time.Second).Acquire(ctx) }},
		{"ratelimit_try: RateLimit.Per must be > 0 and at most 8784h0m0s (366 days), not 9600h0m0s", func() error {
			_, e := db.RateLimit("r", 1, 400*day).Try(ctx)
			return e
		}},
		{"schedule_set: ScheduleOptions.JobExpires must be >= 0, not -1s", func() error {
			_, e := db.SetSchedule(ctx, "s", "* * * * *", "q", nil, &tocsin.ScheduleOptions{JobExpires: -time.Second})
			return e
		}},
		{"worker_open: WorkerOptions.Visibility must be 0 (30s) or at least 3ms, not 2ms", func() error {
			_, e := db.NewWorker(tocsin.WorkerOptions{Queues: []string{"q"}, Visibility: 2 * time.Millisecond})
			return e
		}},
		{"worker_open: WorkerOptions.SchedulerTTL must be between 3ms and 8784h0m0s (366 days), not 9600h0m0s", func() error {
			_, e := db.NewWorker(tocsin.WorkerOptions{Queues: []string{"q"}, Scheduler: true, SchedulerTTL: 400 * day})
			return e
		}},
	}
	for _, c := range cases {
		err := c.call()
		if !errors.Is(err, tocsin.ErrInvalid) {
			t.Errorf("%q: got %v, want ErrInvalid", c.want, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, c.want) || strings.Contains(msg, "_ms") {
			t.Errorf("got %q, want it to contain %q (and no C argument name)", msg, c.want)
		}
	}
	st, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending+st.Scheduled != 0 || st.Processing != 1 {
		t.Errorf("a refused call wrote: %+v", st)
	}
	if owner, _, _, err := db.LockHolder(ctx, "l"); err != nil || owner != "" {
		t.Errorf("a refused lock was taken: %q %v", owner, err)
	}
	// the last instant is accepted
	last := time.UnixMilli(253402300799999)
	if _, err := q.Enqueue(ctx, 1, &tocsin.EnqueueOptions{RunAt: last}); err != nil {
		t.Errorf("RunAt %v: %v", last, err)
	}
}
