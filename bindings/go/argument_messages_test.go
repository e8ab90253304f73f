package tocsin_test

import (
	"context"
	"errors"
	"path/filepath"
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
		{"claim: max must be between 1 and 10000, not 0", func() error { _, e := q.Claim(ctx, "w", 0, time.Minute); return e }},
		{"claim: max must be between 1 and 10000, not 20000", func() error { _, e := q.Claim(ctx, "w", 20000, time.Minute); return e }},
		{"claim: visibility must be >= 0, not -1s", func() error { _, e := q.Claim(ctx, "w", 1, -time.Second); return e }},
		{"heartbeat: extend must be > 0, not 0s", func() error { return q.Heartbeat(ctx, j, 0) }},
		{"dead_purge: before must be after the Unix epoch", func() error { _, e := q.Purge(ctx, far); return e }},
		// the fixed clock: the other bindings refuse a time before the epoch (it was taken)
		{"set_clock: t must be between the Unix epoch and 9999-12-31T23:59:59.999Z, not 1969-12-31", func() error {
			return db.SetTime(before)
		}},
		{"set_clock: t must be between the Unix epoch", func() error { return db.SetTime(far) }},
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
		{"notify_autotrim: oneIn must be >= 0 (0: off), not -1", func() error { return db.SetNotifyAutotrim(ctx, 0, 1, -1) }},
		{"notify_autotrim: maxKeep must be >= 0, not -2", func() error { return db.SetNotifyAutotrim(ctx, 0, -2, 1) }},
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
	cases = append(cases, optionFieldCases(ctx, db, filepath.Join(t.TempDir(), "never-opened.db"))...)
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

// optionFieldCases: a negative (or out of range) field of an options struct is refused
// naming that one field and the value as given, not a list of fields.
func optionFieldCases(ctx context.Context, db *tocsin.DB, path string) []struct {
	want string
	call func() error
} {
	open := func(o tocsin.Options) func() error {
		return func() error {
			d, e := tocsin.Open(path, &o)
			if e == nil {
				d.Close()
			}
			return e
		}
	}
	worker := func(o tocsin.WorkerOptions) func() error {
		return func() error {
			o.Queues = []string{"q"}
			_, e := db.NewWorker(o) // (one opened by mistake closes with db)
			return e
		}
	}
	call := func(o tocsin.CallOptions) func() error {
		return func() error { _, e := db.Call(ctx, "q", "t", nil, nil, &o); return e }
	}
	sub := func(o tocsin.SubscribeOptions) func() error {
		return func() error {
			s, e := db.Stream("t").Subscribe(ctx, "c", &o)
			if e == nil {
				s.Close()
			}
			return e
		}
	}
	listen := func(n int) func() error {
		return func() error {
			l, e := db.Listen(ctx, "ch", &tocsin.ListenOptions{BufferSize: n})
			if e == nil {
				l.Close()
			}
			return e
		}
	}
	prune := func(o tocsin.PruneOptions) func() error {
		return func() error { _, e := db.Prune(ctx, o); return e }
	}
	minus := int64(-1)
	return []struct {
		want string
		call func() error
	}{
		{"open: Options.BusyTimeout must be >= 0, not -1ns", open(tocsin.Options{BusyTimeout: -1})},
		{"open: Options.MaxPayloadBytes must be >= 0 (0: 1 MiB), not -5", open(tocsin.Options{MaxPayloadBytes: -5})},
		{"worker_open: WorkerOptions.Concurrency must be between 1 and 10000 (0: 1), not -1",
			worker(tocsin.WorkerOptions{Concurrency: -1})},
		{"worker_open: WorkerOptions.Concurrency must be between 1 and 10000 (0: 1), not 20000",
			worker(tocsin.WorkerOptions{Concurrency: 20000})},
		{"worker_open: WorkerOptions.Visibility must be >= 0, not -1s", worker(tocsin.WorkerOptions{Visibility: -time.Second})},
		{"worker_open: WorkerOptions.ShutdownTimeout must be >= 0, not -2s",
			worker(tocsin.WorkerOptions{ShutdownTimeout: -2 * time.Second})},
		{"worker_open: WorkerOptions.SchedulerTTL must be >= 0, not -3s", worker(tocsin.WorkerOptions{SchedulerTTL: -3 * time.Second})},
		{"worker_open: WorkerOptions.UnknownTaskDelay must be >= 0, not -1ms",
			worker(tocsin.WorkerOptions{UnknownTaskDelay: -time.Millisecond})},
		{"worker_open: WorkerOptions.UnknownTaskHandbacks must be between 1 and 1000000 (0: 20), not -4",
			worker(tocsin.WorkerOptions{UnknownTaskHandbacks: -4})},
		{"task_enqueue: CallOptions.ResultTTL must be >= 0, not -1s", call(tocsin.CallOptions{ResultTTL: -time.Second})},
		{"task_enqueue: CallOptions.Timeout must be >= 0, not -2s", call(tocsin.CallOptions{Timeout: -2 * time.Second})},
		{"task_enqueue: CallOptions.ResultTTL must be >= 0, not -1s", func() error { // database/sql's CallTx
			_, e := tocsin.CallTx(ctx, nil, "q", "t", nil, nil, &tocsin.CallOptions{ResultTTL: -time.Second})
			return e
		}},
		{"task_enqueue: CallOptions.Timeout must be >= 0, not -2s", func() error {
			_, e := db.Envelope("t", "", "", &tocsin.CallOptions{Timeout: -2 * time.Second})
			return e
		}},
		{"subscribe: SubscribeOptions.FromOffset must be >= 0, not -1", sub(tocsin.SubscribeOptions{FromOffset: &minus})},
		{"subscribe: SubscribeOptions.Batch must be between 1 and 10000 (0: 100), not -1", sub(tocsin.SubscribeOptions{Batch: -1})},
		{"subscribe: SubscribeOptions.Batch must be between 1 and 10000 (0: 100), not 20000",
			sub(tocsin.SubscribeOptions{Batch: 20000})},
		{"subscribe: SubscribeOptions.AutosaveEvery must be >= 0, not -2", sub(tocsin.SubscribeOptions{AutosaveEvery: -2})},
		{"subscribe: SubscribeOptions.AutosaveAfter must be >= 0, not -1s",
			sub(tocsin.SubscribeOptions{AutosaveAfter: -time.Second})},
		{"listen: ListenOptions.BufferSize must be between 1 and 10000 (0: 1000), not -1", listen(-1)},
		{"listen: ListenOptions.BufferSize must be between 1 and 10000 (0: 1000), not 20000", listen(20000)},
		{"prune: PruneOptions.NotificationsMaxAge must be >= 0, not -1s",
			prune(tocsin.PruneOptions{NotificationsMaxAge: -time.Second, NotificationsMaxKeep: 5})},
		{"prune: PruneOptions.NotificationsMaxKeep must be >= 0, not -1",
			prune(tocsin.PruneOptions{NotificationsMaxKeep: -1})}, // was skipped silently
	}
}
