// Command bench-peers-go is one measurement for bench/run.py:
//
//	bench-peers-go IMPL WORKLOAD --dir DIR [--n N]
//
// IMPL: tocsin (the Go binding) | raw (database/sql + mattn/go-sqlite3, the SQL of a
// minimal queue) | goqite (on mattn/go-sqlite3) | river (riversqlite; its migrations need
// jsonb, newer than the system SQLite, so it runs on modernc.org/sqlite). Every file: WAL,
// synchronous=NORMAL, one connection, the same JSON payload. Prints one JSON object
// {"metrics": {...}, "samples": {...}}.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"syscall"
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

type payload struct {
	To       string  `json:"to"`
	Template string  `json:"template"`
	N        int     `json:"n"`
	T        float64 `json:"tn,omitempty"`
	I        int     `json:"i,omitempty"`
}

var P = payload{To: "ada@example.org", Template: "welcome", N: 1}

type benchArgs struct {
	To       string `json:"to"`
	Template string `json:"template"`
	N        int    `json:"n"`
}

func (benchArgs) Kind() string { return "bench" }

type benchWorker struct {
	river.WorkerDefaults[benchArgs]
}

func (benchWorker) Work(context.Context, *river.Job[benchArgs]) error { return nil }

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-peers-go:", err)
		os.Exit(1)
	}
}

type system struct {
	enqueue     func()
	enqueue100  func()
	claimAck    func() bool
	claimAck100 func() int
	fill        func(n int)
	start       func() // river: its client works the jobs
}

const rawSchema = `CREATE TABLE IF NOT EXISTS jobs(id INTEGER PRIMARY KEY, queue TEXT NOT NULL,
  payload TEXT NOT NULL, ready INTEGER NOT NULL DEFAULT 1, lease_until INTEGER, worker TEXT);
CREATE INDEX IF NOT EXISTS jobs_ready ON jobs(queue, id) WHERE ready = 1;`

func sqlDB(path string) *sql.DB {
	db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_synchronous=NORMAL&_busy_timeout=10000&_txlock=immediate")
	check(err)
	db.SetMaxOpenConns(1)
	return db
}

func body() []byte { b, _ := json.Marshal(P); return b }

func open(impl, path string, n int) system {
	switch impl {
	case "tocsin":
		db, err := tocsin.Open(path, nil)
		check(err)
		q := db.Queue("bench")
		batch := make([]tocsin.JobSpec, 100)
		for i := range batch {
			batch[i] = tocsin.JobSpec{Payload: P}
		}
		return system{
			enqueue:    func() { _, err := q.Enqueue(ctx, P, nil); check(err) },
			enqueue100: func() { _, err := q.EnqueueMany(ctx, batch); check(err) },
			claimAck: func() bool {
				js, err := q.Claim(ctx, "w1", 1, 30*time.Second)
				check(err)
				if len(js) == 0 {
					return false
				}
				var p payload
				check(js[0].Decode(&p))
				check(q.Ack(ctx, &js[0]))
				return true
			},
			claimAck100: func() int {
				js, err := q.Claim(ctx, "w1", 100, 30*time.Second)
				check(err)
				for i := range js {
					var p payload
					check(js[i].Decode(&p))
				}
				_, err = db.AckBatch(ctx, js)
				check(err)
				return len(js)
			},
			fill: func(n int) {
				for i := 0; i < n; i += 100 {
					_, err := q.EnqueueMany(ctx, batch[:min(100, n-i)])
					check(err)
				}
			},
		}
	case "raw":
		db := sqlDB(path)
		_, err := db.Exec(rawSchema)
		check(err)
		ins, _ := db.Prepare("INSERT INTO jobs(queue, payload) VALUES (?, ?)")
		claimSQL := "UPDATE jobs SET ready = 0, lease_until = ?, worker = ? WHERE id IN " +
			"(SELECT id FROM jobs WHERE queue = ? AND ready = 1 ORDER BY id LIMIT ?) RETURNING id, payload"
		insMany := func(k int) {
			tx, err := db.Begin()
			check(err)
			st := tx.Stmt(ins)
			for i := 0; i < k; i++ {
				_, err = st.Exec("bench", body())
				check(err)
			}
			check(tx.Commit())
		}
		claim := func(k int) []int64 {
			tx, err := db.Begin()
			check(err)
			rows, err := tx.Query(claimSQL, time.Now().UnixMilli()+30000, "w1", "bench", k)
			check(err)
			var ids []int64
			for rows.Next() {
				var id int64
				var pl []byte
				check(rows.Scan(&id, &pl))
				var p payload
				check(json.Unmarshal(pl, &p))
				ids = append(ids, id)
			}
			rows.Close()
			check(tx.Commit())
			return ids
		}
		return system{
			enqueue:    func() { _, err := ins.Exec("bench", body()); check(err) },
			enqueue100: func() { insMany(100) },
			claimAck: func() bool {
				ids := claim(1)
				if len(ids) == 0 {
					return false
				}
				_, err := db.Exec("DELETE FROM jobs WHERE id = ?", ids[0])
				check(err)
				return true
			},
			claimAck100: func() int {
				ids := claim(100)
				tx, err := db.Begin()
				check(err)
				for _, id := range ids {
					_, err = tx.Exec("DELETE FROM jobs WHERE id = ?", id)
					check(err)
				}
				check(tx.Commit())
				return len(ids)
			},
			fill: func(n int) {
				for i := 0; i < n; i += 1000 {
					insMany(min(1000, n-i))
				}
			},
		}
	case "goqite":
		db := sqlDB(path)
		check(goqite.Setup(ctx, db))
		q := goqite.New(goqite.NewOpts{DB: db, Name: "bench"})
		send100 := func(k int) {
			tx, err := db.BeginTx(ctx, nil)
			check(err)
			for i := 0; i < k; i++ {
				check(q.SendTx(ctx, tx, goqite.Message{Body: body()}))
			}
			check(tx.Commit())
		}
		return system{
			enqueue:    func() { check(q.Send(ctx, goqite.Message{Body: body()})) },
			enqueue100: func() { send100(100) },
			claimAck: func() bool {
				m, err := q.Receive(ctx)
				check(err)
				if m == nil {
					return false
				}
				var p payload
				check(json.Unmarshal(m.Body, &p))
				check(q.Delete(ctx, m.ID))
				return true
			},
			fill: func(n int) {
				for i := 0; i < n; i += 1000 {
					send100(min(1000, n-i))
				}
			},
		}
	case "river":
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(10000)&_txlock=immediate")
		check(err)
		db.SetMaxOpenConns(1)
		drv := riversqlite.New(db)
		mig, err := rivermigrate.New(drv, nil)
		check(err)
		_, err = mig.Migrate(ctx, rivermigrate.DirectionUp, nil)
		check(err)
		ws := river.NewWorkers()
		river.AddWorker(ws, benchWorker{})
		c, err := river.NewClient(drv, &river.Config{Workers: ws, FetchCooldown: time.Millisecond,
			FetchPollInterval: time.Millisecond, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}}})
		check(err)
		a := benchArgs{To: P.To, Template: P.Template, N: 1}
		many := make([]river.InsertManyParams, 100)
		for i := range many {
			many[i] = river.InsertManyParams{Args: a}
		}
		ev, _ := c.Subscribe(river.EventKindJobCompleted)
		return system{
			enqueue:    func() { _, err := c.Insert(ctx, a, nil); check(err) },
			enqueue100: func() { _, err := c.InsertMany(ctx, many); check(err) },
			// River has no claim call: its client fetches and works the jobs; one
			// completion event is one job claimed, worked and completed
			claimAck: func() bool { <-ev; return true },
			fill: func(n int) {
				for i := 0; i < n; i += 100 {
					_, err := c.InsertMany(ctx, many[:min(100, n-i)])
					check(err)
				}
			},
			start: func() { check(c.Start(ctx)) },
		}
	}
	check(fmt.Errorf("unknown impl %s", impl))
	return system{}
}

func rate(n int, fn func()) float64 {
	t := time.Now()
	fn()
	return float64(n) / time.Since(t).Seconds()
}

func wall() float64 { return float64(time.Now().UnixNano()) / 1e6 }

func throughput(impl, w, dir string, n int) map[string]float64 {
	s := open(impl, filepath.Join(dir, w+".db"), n)
	rounds := max(1, n/100)
	switch w {
	case "enq1":
		return map[string]float64{"ops_s": rate(n, func() {
			for i := 0; i < n; i++ {
				s.enqueue()
			}
		})}
	case "enq100":
		return map[string]float64{"ops_s": rate(rounds*100, func() {
			for i := 0; i < rounds; i++ {
				s.enqueue100()
			}
		})}
	case "ca1":
		s.fill(n)
		if s.start != nil {
			s.start()
		}
		return map[string]float64{"ops_s": rate(n, func() {
			for i := 0; i < n; i++ {
				if !s.claimAck() {
					check(fmt.Errorf("queue ran dry"))
				}
			}
		})}
	case "ca100":
		s.fill(rounds * 100)
		return map[string]float64{"ops_s": rate(rounds*100, func() {
			for i := 0; i < rounds; i++ {
				if s.claimAck100() != 100 {
					check(fmt.Errorf("short batch"))
				}
			}
		})}
	}
	check(fmt.Errorf("unknown workload %s", w))
	return nil
}

// wake: this process claims (waking on commits), a child enqueues every 2-4 ms
func wake(dir string, n int) (map[string]float64, map[string][]float64) {
	path := filepath.Join(dir, "lat.db")
	db, err := tocsin.Open(path, nil)
	check(err)
	q := db.Queue("bench")
	child := exec.Command(os.Args[0], "tocsin", "produce-wake", "--dir", dir, "--n", fmt.Sprint(n))
	child.Stderr = os.Stderr
	check(child.Start())
	var lat []float64
	got := map[int]float64{}
	for {
		js, err := q.Claim(ctx, "w1", 1, 30*time.Second)
		check(err)
		if len(js) == 0 {
			check(q.Wait(ctx))
			continue
		}
		var p payload
		check(js[0].Decode(&p))
		t := wall()
		check(q.Ack(ctx, &js[0]))
		if p.I < 0 {
			break
		}
		lat = append(lat, t-p.T)
		got[p.I] = t
	}
	check(child.Wait())
	raw, err := os.ReadFile(filepath.Join(dir, "sent.json"))
	check(err)
	var sent []float64
	check(json.Unmarshal(raw, &sent))
	var after []float64
	for i, t := range got {
		after = append(after, t-sent[i-1])
	}
	sort.Float64s(lat)
	sort.Float64s(after)
	pct := func(v []float64, x float64) float64 { return v[min(len(v)-1, int(x*float64(len(v))))] }
	return map[string]float64{"p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99),
		"p50_commit_ms": pct(after, 0.5), "p99_commit_ms": pct(after, 0.99)}, map[string][]float64{"latency": lat}
}

func produce(dir string, n int) {
	db, err := tocsin.Open(filepath.Join(dir, "lat.db"), nil)
	check(err)
	q := db.Queue("bench")
	time.Sleep(300 * time.Millisecond)
	sent := make([]float64, 0, n) // when each enqueue returned: its commit is visible from then on
	for i := 0; i < n; i++ {
		time.Sleep(time.Duration(2000+rand.Intn(2000)) * time.Microsecond)
		_, err := q.Enqueue(ctx, payload{T: wall(), I: i + 1}, nil)
		check(err)
		sent = append(sent, wall())
	}
	out, err := json.Marshal(sent)
	check(err)
	check(os.WriteFile(filepath.Join(dir, "sent.json"), out, 0o644))
	_, err = q.Enqueue(ctx, payload{I: -1}, nil)
	check(err)
}

type noArgs struct{}

// the worker runner: 2 child processes, each db.NewWorker with concurrency 4
func workerChild(dir string) {
	db, err := tocsin.Open(filepath.Join(dir, "worker.db"), nil)
	check(err)
	tocsin.Task(db, "noop", func(context.Context, noArgs) (any, error) { return nil, nil }, &tocsin.TaskOptions{Queue: "bench"})
	w, err := db.NewWorker(tocsin.WorkerOptions{Concurrency: 4, Queues: []string{"bench"}})
	check(err)
	c, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	check(w.Run(c))
}

func worker(dir string, n int) map[string]float64 {
	path := filepath.Join(dir, "worker.db")
	db, err := tocsin.Open(path, nil)
	check(err)
	var ps []*exec.Cmd
	for i := 0; i < 2; i++ {
		p := exec.Command(os.Args[0], "tocsin", "worker-child", "--dir", dir)
		p.Stderr = os.Stderr
		check(p.Start())
		ps = append(ps, p)
	}
	defer func() {
		for _, p := range ps {
			p.Process.Signal(syscall.SIGTERM)
			p.Wait()
		}
	}()
	ro := sqlDB(path)
	count := func(q string) (c int) { check(ro.QueryRow(q).Scan(&c)); return }
	end := time.Now().Add(60 * time.Second)
	for count("SELECT count(*) FROM _tocsin_workers") < 2 {
		if time.Now().After(end) {
			check(fmt.Errorf("the workers did not start"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	check(db.Tx(ctx, func(tx *tocsin.Tx) error {
		for i := 0; i < n; i++ {
			if _, err := tx.Call(ctx, "bench", "noop", []any{}, nil, nil); err != nil {
				return err
			}
		}
		return nil
	}))
	t0 := time.Now()
	end = time.Now().Add(120 * time.Second)
	for count("SELECT EXISTS (SELECT 1 FROM _tocsin_jobs)") > 0 {
		if time.Now().After(end) {
			check(fmt.Errorf("the workers did not finish"))
		}
		time.Sleep(2 * time.Millisecond)
	}
	return map[string]float64{"tasks_s": float64(n) / time.Since(t0).Seconds()}
}

func main() {
	if len(os.Args) < 3 {
		check(fmt.Errorf("usage: bench-peers-go IMPL WORKLOAD --dir DIR [--n N]"))
	}
	impl, w := os.Args[1], os.Args[2]
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	dir := fs.String("dir", os.TempDir(), "")
	n := fs.Int("n", 5000, "")
	fs.Float64("seconds", 0, "")
	fs.Int("backlog", 0, "")
	check(fs.Parse(os.Args[3:]))
	var m map[string]float64
	s := map[string][]float64{}
	switch w {
	case "produce-wake":
		produce(*dir, *n)
		return
	case "worker-child":
		workerChild(*dir)
		return
	case "wake":
		m, s = wake(*dir, *n)
	case "worker":
		m = worker(*dir, *n)
	default:
		m = throughput(impl, w, *dir, *n)
	}
	out, _ := json.Marshal(map[string]any{"metrics": m, "samples": s})
	fmt.Println(string(out))
}
