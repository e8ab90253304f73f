// Command bench prints testing.B figures of single-job enqueue and claim+ack for the Go
// binding, the C core (same process, same operations), goqite and River's SQLite
// driver, all on fresh files in one run (make bench-go). goqite uses mattn/go-sqlite3
// built with -tags libsqlite3 (the same system SQLite as tocsin); River's SQLite driver
// needs a newer SQLite (jsonb) and runs on modernc.org/sqlite.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/maragudk/goqite"
	_ "github.com/mattn/go-sqlite3"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

var ctx = context.Background()

func tmpFile(dir, name string) string {
	p := filepath.Join(dir, name)
	for _, s := range []string{"", "-wal", "-shm"} {
		os.Remove(p + s)
	}
	return p
}

func nsPerOp(r testing.BenchmarkResult) float64 { return float64(r.T.Nanoseconds()) / float64(r.N) }

func sqlDB(path string) *sql.DB {
	db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_synchronous=NORMAL&_busy_timeout=5000&_txlock=immediate")
	if err != nil {
		panic(err)
	}
	db.SetMaxOpenConns(1)
	return db
}

type payload struct {
	N int `json:"n"`
}

type benchArgs struct {
	N int `json:"n"`
}

func (benchArgs) Kind() string { return "bench" }

type benchWorker struct {
	river.WorkerDefaults[benchArgs]
}

func (benchWorker) Work(context.Context, *river.Job[benchArgs]) error { return nil }

func main() {
	dir := flag.String("dir", os.TempDir(), "where the bench files go")
	rounds := flag.Int("rounds", 3, "interleaved rounds of the Go and C figures (best kept)")
	flag.Parse()
	seq := 0
	next := func(name string) string { seq++; return tmpFile(*dir, fmt.Sprintf("gobench-%s-%d.db", name, seq)) }

	goEnqF := func() testing.BenchmarkResult {
		return (testing.Benchmark(func(b *testing.B) {
			db, _ := tocsin.Open(next("go"), nil)
			defer db.Close()
			q := db.Queue("bench")
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := q.Enqueue(ctx, payload{1}, nil); err != nil {
					b.Fatal(err)
				}
			}
		}))
	}
	goClaimF := func() testing.BenchmarkResult {
		return (testing.Benchmark(func(b *testing.B) {
			db, _ := tocsin.Open(next("go"), nil)
			defer db.Close()
			q := db.Queue("bench")
			for i := 0; i < b.N; i++ {
				q.Enqueue(ctx, payload{1}, nil)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				j, err := q.ClaimOne(ctx, "w", 30*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if err := q.Ack(ctx, j); err != nil {
					b.Fatal(err)
				}
			}
		}))
	}
	// the machine is shared: interleave Go and C rounds and keep each one's best
	goEnq, goClaim, cEnq, cClaim := 1e18, 1e18, 1e18, 1e18
	for round := 0; round < *rounds; round++ {
		// C runs the same number of operations as testing.B settled on (the file's size
		// and the WAL's checkpoints depend on it)
		r := goEnqF()
		goEnq = min(goEnq, nsPerOp(r))
		cEnq = min(cEnq, cEnqueue(next("c"), r.N))
		r = goClaimF()
		goClaim = min(goClaim, nsPerOp(r))
		cClaim = min(cClaim, cClaimAck(next("c"), r.N))
	}

	gqQueue := func() (*sql.DB, *goqite.Queue) {
		db := sqlDB(next("goqite"))
		if err := goqite.Setup(ctx, db); err != nil {
			panic(err)
		}
		return db, goqite.New(goqite.NewOpts{DB: db, Name: "bench"})
	}
	gqEnq := testing.Benchmark(func(b *testing.B) {
		db, q := gqQueue()
		defer db.Close()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := q.Send(ctx, goqite.Message{Body: []byte(`{"n":1}`)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	gqClaim := testing.Benchmark(func(b *testing.B) {
		db, q := gqQueue()
		defer db.Close()
		for i := 0; i < b.N; i++ {
			q.Send(ctx, goqite.Message{Body: []byte(`{"n":1}`)})
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			m, err := q.Receive(ctx)
			if err != nil || m == nil {
				b.Fatal(err)
			}
			if err := q.Delete(ctx, m.ID); err != nil {
				b.Fatal(err)
			}
		}
	})

	riverSetup := func(work bool) (*sql.DB, *river.Client[*sql.Tx], <-chan *river.Event, func()) {
		// River's SQLite migrations need jsonb (SQLite >= 3.45), newer than the system
		// SQLite: it runs on modernc.org/sqlite (pure Go), on files of its own.
		db, err := sql.Open("sqlite", "file:"+next("river")+"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(5000)&_txlock=immediate")
		if err != nil {
			panic(err)
		}
		db.SetMaxOpenConns(1)
		drv := riversqlite.New(db)
		mig, err := rivermigrate.New(drv, nil)
		if err != nil {
			panic(err)
		}
		if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			panic(err)
		}
		cfg := &river.Config{}
		if work {
			ws := river.NewWorkers()
			river.AddWorker(ws, benchWorker{})
			cfg = &river.Config{Workers: ws, FetchCooldown: time.Millisecond, FetchPollInterval: time.Millisecond,
				Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}}}
		}
		c, err := river.NewClient(drv, cfg)
		if err != nil {
			panic(err)
		}
		var ev <-chan *river.Event
		cancel := func() {}
		if work {
			ev, cancel = c.Subscribe(river.EventKindJobCompleted)
		}
		return db, c, ev, cancel
	}
	rvEnq := testing.Benchmark(func(b *testing.B) {
		db, c, _, _ := riverSetup(false)
		defer db.Close()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := c.Insert(ctx, benchArgs{1}, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	rvClaim := testing.Benchmark(func(b *testing.B) {
		db, c, ev, cancel := riverSetup(true)
		defer db.Close()
		defer cancel()
		for i := 0; i < b.N; i++ {
			c.Insert(ctx, benchArgs{1}, nil)
		}
		b.ResetTimer()
		if err := c.Start(ctx); err != nil {
			b.Fatal(err)
		}
		for i := 0; i < b.N; i++ {
			<-ev
		}
		b.StopTimer()
		c.Stop(ctx)
	})

	fmt.Println("Go binding vs C core and Go peers: single-job enqueue and claim+ack (ns/op, lower is better)")
	fmt.Println("(one process, fresh WAL files, system SQLite", tocsin.SQLite().Version+"; goqite via mattn/go-sqlite3 -tags libsqlite3,")
	fmt.Println(" River via modernc.org/sqlite", "- each with WAL, synchronous=NORMAL, one connection)")
	fmt.Printf("  %-34s %12s %12s %12s\n", "operation", "enqueue", "claim+ack", "")
	row := func(name string, e, c float64) { fmt.Printf("  %-34s %12.0f %12.0f\n", name, e, c) }
	row("tocsin Go (testing.B, best round)", goEnq, goClaim)
	row("tocsin C (same ops, best round)", cEnq, cClaim)
	row("goqite (testing.B)", nsPerOp(gqEnq), nsPerOp(gqClaim))
	row("River + riversqlite (testing.B)", nsPerOp(rvEnq), nsPerOp(rvClaim))
	fmt.Println("ratios (throughput; target: Go/C >= 0.80, Go/peer > 1):")
	ratio := func(name string, a, b float64) { fmt.Printf("  %-34s %12.2f\n", name, b/a) }
	ratio("Go / C, enqueue", goEnq, cEnq)
	ratio("Go / C, claim+ack", goClaim, cClaim)
	ratio("Go / goqite, enqueue", goEnq, nsPerOp(gqEnq))
	ratio("Go / goqite, claim+ack", goClaim, nsPerOp(gqClaim))
	ratio("Go / River, enqueue", goEnq, nsPerOp(rvEnq))
	ratio("Go / River, claim+ack", goClaim, nsPerOp(rvClaim))
	fmt.Println("  (River claim+ack: its client works pre-inserted jobs, 1 worker, 1 ms fetch poll/cooldown)")
}
