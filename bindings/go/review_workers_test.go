package tocsin_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

// syncBuf is a log sink the worker's goroutines may write while the test reads.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// docs/worker-protocol.md: a binding warns when it starts a worker on a queue for
// which it registered no task (its jobs are handed back, then die as UnknownTask).
// Python and Node warned; Go said nothing.
func TestWorkerWarnsOfAQueueWithoutTasks(t *testing.T) {
	db := openDB(t)
	tocsin.Task(db, "known", func(ctx context.Context, a any) (int, error) { return 1, nil },
		&tocsin.TaskOptions{Queue: "has-tasks"})
	var out syncBuf
	w, err := db.NewWorker(tocsin.WorkerOptions{Queues: []string{"has-tasks", "orphan"},
		Logger: slog.New(slog.NewTextHandler(&out, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	cancel() // a context that already ended: Run claims nothing and returns
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	var warned []string
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "no task is declared") {
			warned = append(warned, line)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "queue=orphan") {
		t.Fatalf("want one warning naming queue orphan, got %q (log: %s)", warned, out.String())
	}
}
