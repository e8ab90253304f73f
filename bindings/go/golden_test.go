package tocsin_test

// The golden databases of interop-tests/golden, read through the Go API: a copy
// of each file the manifest names, its facts checked, then new work on it.

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

type goldenFile struct {
	JournalMode string `json:"journal_mode"`
	Queues      map[string]struct {
		Pending, Scheduled, Processing, Dead, Paused int64
	} `json:"queues"`
	Jobs []struct {
		ID          int64           `json:"id"`
		Queue       string          `json:"queue"`
		State       string          `json:"state"`
		Payload     json.RawMessage `json:"payload"`
		Meta        json.RawMessage `json:"meta"`
		Priority    int64           `json:"priority"`
		Attempts    int             `json:"attempts"`
		MaxAttempts int             `json:"max_attempts"`
		RunAt       int64           `json:"run_at"`
		UniqueKey   *string         `json:"unique_key"`
		Worker      *string         `json:"worker"`
	} `json:"jobs"`
	Dead []struct {
		ID        int64           `json:"id"`
		Queue     string          `json:"queue"`
		Reason    string          `json:"reason"`
		LastError *string         `json:"last_error"`
		Payload   json.RawMessage `json:"payload"`
		Attempts  int             `json:"attempts"`
	} `json:"dead"`
	Results []struct {
		JobID        int64   `json:"job_id"`
		Status       string  `json:"status"`
		Value        *string `json:"value"`
		ErrorType    *string `json:"error_type"`
		ErrorMessage *string `json:"error_message"`
		ErrorTrace   *string `json:"error_trace"`
	} `json:"results"`
	Streams []struct {
		Topic      string `json:"topic"`
		LastOffset int64  `json:"last_offset"`
		Events     []struct {
			Offset  int64           `json:"offset"`
			Key     *string         `json:"key"`
			Payload json.RawMessage `json:"payload"`
			Meta    json.RawMessage `json:"meta"`
		} `json:"events"`
		Consumers map[string]int64 `json:"consumers"`
	} `json:"streams"`
	Notifications []struct {
		ID      int64           `json:"id"`
		Channel string          `json:"channel"`
		Payload json.RawMessage `json:"payload"`
		Meta    json.RawMessage `json:"meta"`
	} `json:"notifications"`
	MaxNotificationID int64 `json:"max_notification_id"`
	Locks             []struct {
		Name  string `json:"name"`
		Token int64  `json:"token"`
	} `json:"locks"`
	Schedules []struct {
		Name        string          `json:"name"`
		Cron        string          `json:"cron"`
		Queue       string          `json:"queue"`
		Payload     json.RawMessage `json:"payload"`
		Meta        json.RawMessage `json:"meta"`
		Priority    int64           `json:"priority"`
		MaxAttempts int             `json:"max_attempts"`
		CatchUp     string          `json:"catch_up"`
		MaxCatchUp  int             `json:"max_catch_up"`
		Paused      int             `json:"paused"`
		NextFire    int64           `json:"next_fire"`
	} `json:"schedules"`
}

func goldenDir() string { return filepath.Join("..", "..", "interop-tests", "golden") }

func loadManifest(t *testing.T) map[string]goldenFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(goldenDir(), "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Files map[string]goldenFile `json:"files"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Files["v1-full.db"]; !ok || len(m.Files) < 2 {
		t.Fatalf("manifest names %d files", len(m.Files))
	}
	return m.Files
}

// sameJSON: two JSON texts denote the same value (nil and "null" alike).
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if len(a) == 0 {
		a = json.RawMessage("null")
	}
	if len(b) == 0 {
		b = json.RawMessage("null")
	}
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func openGoldenCopy(t *testing.T, name string) (*tocsin.DB, string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(goldenDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := tocsin.Open(dst, nil)
	if err != nil {
		t.Fatal(err)
	}
	return db, dst
}

func TestGoldenFiles(t *testing.T) {
	files := loadManifest(t)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		m := files[name]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db, path := openGoldenCopy(t, name)
			defer db.Close()
			for q, want := range m.Queues {
				st, err := db.Queue(q).Stats(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if st.Pending != want.Pending || st.Scheduled != want.Scheduled || st.Processing != want.Processing ||
					st.Dead != want.Dead || st.Paused != (want.Paused != 0) {
					t.Errorf("stats %s: %+v, want %+v", q, st, want)
				}
			}
			for _, j := range m.Jobs {
				job, err := db.Queue(j.Queue).Get(ctx, j.ID)
				if err != nil || job == nil {
					t.Fatalf("job %d: %v", j.ID, err)
				}
				if job.Queue != j.Queue || job.State != j.State || !sameJSON(job.Payload, j.Payload) ||
					!sameJSON(job.Meta, j.Meta) || job.Priority != j.Priority || job.Attempts != j.Attempts ||
					job.MaxAttempts != j.MaxAttempts || job.RunAt.UnixMilli() != j.RunAt ||
					job.UniqueKey != str(j.UniqueKey) || job.Worker != str(j.Worker) {
					t.Errorf("job %d: %+v", j.ID, job)
				}
			}
			dead := map[int64]tocsin.Job{}
			for _, d := range m.Dead {
				list, err := db.Queue(d.Queue).DeadLetters(ctx, 0, 1000)
				if err != nil {
					t.Fatal(err)
				}
				for _, j := range list {
					dead[j.ID] = j
				}
			}
			if len(dead) != len(m.Dead) {
				t.Errorf("%d dead letters, want %d", len(dead), len(m.Dead))
			}
			for _, d := range m.Dead {
				j, ok := dead[d.ID]
				if !ok || j.State != "dead" || j.Reason != d.Reason || j.LastError != str(d.LastError) ||
					!sameJSON(j.Payload, d.Payload) || j.Attempts != d.Attempts {
					t.Errorf("dead %d: %+v", d.ID, j)
				}
			}
			for _, r := range m.Results {
				res, err := db.Result(ctx, r.JobID)
				if err != nil || res == nil {
					t.Fatalf("result %d: %v", r.JobID, err)
				}
				if r.Status == "ok" {
					if res.Err != nil || !sameJSON(res.Value, json.RawMessage(str(r.Value))) {
						t.Errorf("result %d: %+v", r.JobID, res)
					}
				} else if res.Err == nil || res.Err.Type != str(r.ErrorType) || res.Err.Message != str(r.ErrorMessage) ||
					res.Err.Trace != str(r.ErrorTrace) {
					t.Errorf("result %d: %+v", r.JobID, res.Err)
				}
				if !res.ExpiresAt.IsZero() {
					t.Errorf("result %d expires", r.JobID)
				}
			}
			for _, s := range m.Streams {
				st := db.Stream(s.Topic)
				ev, err := st.Read(ctx, 0, 1000)
				if err != nil || len(ev) != len(s.Events) {
					t.Fatalf("stream %s: %d events, %v", s.Topic, len(ev), err)
				}
				for i, e := range s.Events {
					if ev[i].ID != e.Offset || ev[i].Key != str(e.Key) || !sameJSON(ev[i].Payload, e.Payload) ||
						!sameJSON(ev[i].Meta, e.Meta) {
						t.Errorf("event %d: %+v", e.Offset, ev[i])
					}
				}
				for consumer, pos := range s.Consumers {
					got, err := st.Offset(ctx, consumer)
					if err != nil || got != pos {
						t.Errorf("offset %s: %d, %v, want %d", consumer, got, err, pos)
					}
					after, _ := st.Read(ctx, got, 1000)
					n := 0
					for _, e := range s.Events {
						if e.Offset > pos {
							n++
						}
					}
					if len(after) != n {
						t.Errorf("after %d: %d events, want %d", pos, len(after), n)
					}
				}
			}
			if id, err := db.NotifyMaxID(ctx); err != nil || id != m.MaxNotificationID {
				t.Errorf("notify max id %d, %v", id, err)
			}
			for _, n := range m.Notifications {
				got, err := db.Notifications(ctx, n.Channel, n.ID-1, 1)
				if err != nil || len(got) != 1 || got[0].ID != n.ID || !sameJSON(got[0].Payload, n.Payload) ||
					!sameJSON(got[0].Meta, n.Meta) {
					t.Errorf("notification %d: %+v, %v", n.ID, got, err)
				}
			}
			for _, lk := range m.Locks {
				owner, token, _, err := db.LockHolder(ctx, lk.Name)
				if err != nil || owner != "" || token != lk.Token {
					t.Errorf("lock %s: %q %d %v", lk.Name, owner, token, err)
				}
			}
			scheds, err := db.Schedules(ctx)
			if err != nil || len(scheds) != len(m.Schedules) {
				t.Fatalf("%d schedules, %v", len(scheds), err)
			}
			for i, want := range m.Schedules {
				got := scheds[i]
				if got.Name != want.Name || got.Cron != want.Cron || got.Queue != want.Queue ||
					!sameJSON(got.Payload, want.Payload) || !sameJSON(got.Meta, want.Meta) ||
					got.Priority != want.Priority || got.MaxAttempts != want.MaxAttempts ||
					got.CatchUpAll != (want.CatchUp == "all") || got.MaxCatchUp != want.MaxCatchUp ||
					got.Paused != (want.Paused != 0) || got.NextFire.UnixMilli() != want.NextFire {
					t.Errorf("schedule %s: %+v", want.Name, got)
				}
			}

			// new work on the old file
			var maxID int64
			for _, j := range m.Jobs {
				maxID = max(maxID, j.ID)
			}
			for _, d := range m.Dead {
				maxID = max(maxID, d.ID)
			}
			emails := db.Queue("emails")
			id, err := emails.Enqueue(ctx, map[string]string{"to": "go@example.com"}, &tocsin.EnqueueOptions{Priority: 100})
			if err != nil || id <= maxID {
				t.Fatalf("enqueue: %d %v", id, err)
			}
			jobs, err := emails.Claim(ctx, "go-golden", 100, time.Minute)
			if err != nil || len(jobs) != int(m.Queues["emails"].Pending)+1 || jobs[0].ID != id {
				t.Fatalf("claim: %d jobs, %v", len(jobs), err)
			}
			for i := range jobs {
				if err := emails.Ack(ctx, &jobs[i]); err != nil {
					t.Fatal(err)
				}
			}
			if len(m.Dead) > 0 {
				q := db.Queue(m.Dead[0].Queue)
				if err := q.Requeue(ctx, m.Dead[0].ID); err != nil {
					t.Fatal(err)
				}
				j, err := q.ClaimOne(ctx, "go-golden", time.Minute)
				if err != nil || j == nil || j.ID != m.Dead[0].ID {
					t.Fatalf("claim requeued: %+v %v", j, err)
				}
				if err := q.Ack(ctx, j); err != nil {
					t.Fatal(err)
				}
			}
			for _, lk := range m.Locks {
				l := db.Lock(lk.Name, "go-golden", time.Minute)
				if ok, err := l.TryAcquire(ctx); err != nil || !ok || l.Token() != lk.Token+1 {
					t.Errorf("lock %s: %v %v token %d", lk.Name, ok, err, l.Token())
				}
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			}
			off, err := db.Stream("orders").Publish(ctx, map[string]string{"order": "go"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range m.Streams {
				if off <= s.LastOffset {
					t.Errorf("offset %d after %d", off, s.LastOffset)
				}
			}
			if nid, err := db.Notify(ctx, "chat", map[string]string{"text": "go"}, nil); err != nil || nid <= m.MaxNotificationID {
				t.Errorf("notify: %d %v", nid, err)
			}
			want := int64(0)
			for _, s := range m.Schedules {
				if s.Paused == 0 && s.CatchUp == "once" {
					want++
				}
			}
			if fired, err := db.SchedulerTick(ctx); err != nil || fired != want {
				t.Errorf("tick: %d %v, want %d", fired, err, want)
			}
			db.Close()
			again, err := tocsin.Open(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			if st, err := again.Queue("emails").Stats(ctx); err != nil || st.Pending != 0 {
				t.Errorf("reopened: %+v %v", st, err)
			}
		})
	}
}
