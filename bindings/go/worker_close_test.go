package tocsin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

// A worker whose close fails (it hands back the jobs still running and leaves the
// workers' registry) says so in Run's error; it was only logged.
func TestWorkerRunReportsAFailedClose(t *testing.T) {
	db := openDB(t)
	tocsin.Task(db, "noop", func(ctx context.Context, _ int) (int, error) { return 0, nil }, &tocsin.TaskOptions{Queue: "q"})
	stop := runWorker(t, db, tocsin.WorkerOptions{Concurrency: 1})
	time.Sleep(50 * time.Millisecond)
	check(t, db.Exec(bg, `CREATE TRIGGER keep_workers BEFORE DELETE ON _tocsin_workers BEGIN SELECT RAISE(ABORT, 'the registry is frozen'); END;`))
	if err := stop(); err == nil || !strings.Contains(err.Error(), "the registry is frozen") {
		t.Fatal("want the failed close, got", err)
	}
	check(t, db.Exec(bg, `DROP TRIGGER keep_workers;`))
}
