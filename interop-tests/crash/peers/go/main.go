// Command peer is the Go peer of the crash suite and the soak: see py_peer.py for the
// modes and the log lines.  peer MODE DB LOGDIR SEED
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

const runtime = "go"

var (
	rng   *rand.Rand
	logFd *os.File
)

// log writes one unbuffered line (a SIGKILL loses nothing written).
func log(format string, a ...any) {
	_, _ = logFd.WriteString(fmt.Sprintf(format, a...) + "\n")
}

func pause(lo, hi int) {
	time.Sleep(time.Duration(lo+rng.Intn(hi-lo+1)) * time.Millisecond)
}

type effectArgs struct {
	N int    `json:"n"`
	P string `json:"p"`
}

// consumer claims and, in one db.Tx, writes the effect row and acks with the lease's
// token: a stale lease's ack is refused (ErrLeaseLost) and the effect rolls back.
func consumer(ctx context.Context, db *tocsin.DB) error {
	q := db.Queue("crash")
	wid := fmt.Sprintf("go-consumer-%d", os.Getpid())
	log("ready")
	for ctx.Err() == nil {
		job, err := q.ClaimOne(ctx, wid, 1500*time.Millisecond)
		if errors.Is(err, tocsin.ErrNotFound) {
			pause(20, 60)
			continue
		} else if err != nil {
			return err
		}
		log("run %d %d", job.ID, job.Attempts)
		pause(0, 15)
		err = db.Tx(ctx, func(tx *tocsin.Tx) error {
			if err := tx.Exec(ctx, fmt.Sprintf("INSERT INTO effects(job_id, runtime, pid, attempt, at) VALUES (%d, 'go', %d, %d, %d)",
				job.ID, os.Getpid(), job.Attempts, time.Now().UnixMilli())); err != nil {
				return err
			}
			pause(0, 15) // a SIGKILL here lands inside the ack transaction
			return tx.Queue("crash").Ack(ctx, job)
		})
		if errors.Is(err, tocsin.ErrLeaseLost) {
			log("refused %d", job.ID)
		} else if err != nil {
			return err
		} else {
			log("acked %d", job.ID)
		}
	}
	return nil
}

// workerTaskTx is the same work as a TaskTx task on the Worker (the suite's default
// Go peer): the effect row, the result and the ack commit in the run's transaction.
func workerTaskTx(ctx context.Context, db *tocsin.DB) error {
	// TaskTx: the effect row, the result and the ack commit in one transaction
	tocsin.TaskTx(db, "crash.effect", func(ctx context.Context, tx *tocsin.Tx, a effectArgs) (map[string]any, error) {
		ri, _ := tocsin.Run(ctx)
		log("run %d %d", ri.JobID, ri.Attempt)
		if err := tx.Exec(ctx, fmt.Sprintf("INSERT INTO effects(job_id, runtime, pid, attempt, at) VALUES (%d, 'go', %d, %d, %d)",
			ri.JobID, os.Getpid(), ri.Attempt, time.Now().UnixMilli())); err != nil {
			return nil, err
		}
		pause(0, 15) // a SIGKILL here lands inside the ack transaction
		return map[string]any{"n": a.N, "by": runtime}, nil
	}, &tocsin.TaskOptions{Queue: "crash"})
	w, err := db.NewWorker(tocsin.WorkerOptions{Queues: []string{"crash"}, Concurrency: 3, Visibility: 3 * time.Second,
		ShutdownTimeout: 5 * time.Second, Scheduler: true, SchedulerTTL: 1500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	log("ready")
	return w.Run(ctx) // ends gracefully when ctx ends (SIGTERM)
}

// scen is the scenarios' Worker (py_peer.py's scen: the same task and reply in every
// runtime).
func scen(ctx context.Context, db *tocsin.DB) error {
	var mu sync.Mutex
	running, peak, seq := 0, 0, 0
	hcap, err := strconv.Atoi(os.Getenv("SCEN_HOLD_CAP_MS"))
	if err != nil {
		hcap = 1 << 30
	}
	tocsin.Task(db, "scen.hold", func(ctx context.Context, ms int) (map[string]any, error) {
		ri, _ := tocsin.Run(ctx)
		mu.Lock()
		seq++
		s := seq
		running++
		if running > peak {
			peak = running
		}
		mu.Unlock()
		log("run %d %d", ri.JobID, ri.Attempt)
		defer func() { mu.Lock(); running--; mu.Unlock() }()
		select {
		case <-time.After(time.Duration(min(ms, hcap)) * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		log("done %d", ri.JobID)
		mu.Lock()
		p := peak
		mu.Unlock()
		return map[string]any{"by": runtime, "pid": os.Getpid(), "attempt": ri.Attempt, "max_attempts": ri.MaxAttempts,
			"seq": s, "peak": p}, nil
	}, &tocsin.TaskOptions{Queue: "scen", MaxAttempts: 10})
	conc, _ := strconv.Atoi(os.Getenv("SCEN_CONCURRENCY"))
	if conc == 0 {
		conc = 2
	}
	shut, _ := strconv.Atoi(os.Getenv("SCEN_SHUTDOWN_MS"))
	if shut == 0 {
		shut = 500
	}
	w, err := db.NewWorker(tocsin.WorkerOptions{Queues: []string{"scen"}, Concurrency: conc, Visibility: 3 * time.Second,
		ShutdownTimeout: time.Duration(shut) * time.Millisecond, Scheduler: true, SchedulerTTL: 1500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	// a second INT/TERM closes at once, as in the other runtimes (Worker.StopNow)
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	go func() {
		<-sig // the first: the context ends, the graceful shutdown begins
		<-sig
		w.StopNow()
	}()
	log("ready")
	return w.Run(ctx)
}

// scenEnqueue is the unique-key scenario's producer: once LOGDIR/scen-go exists, it
// calls scen.hold with unique key SCEN_KEY, logs "id N" and returns.
func scenEnqueue(ctx context.Context, db *tocsin.DB, logDir string) error {
	ms, _ := strconv.Atoi(os.Getenv("SCEN_HOLD_MS"))
	log("ready")
	for {
		if _, err := os.Stat(filepath.Join(logDir, "scen-go")); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	return db.Tx(ctx, func(tx *tocsin.Tx) error {
		h, err := tx.Call(ctx, "scen", "scen.hold", []any{ms}, nil,
			&tocsin.CallOptions{Job: &tocsin.EnqueueOptions{UniqueKey: os.Getenv("SCEN_KEY"), MaxAttempts: 1}})
		if err == nil {
			log("id %d", h.JobID)
		}
		return err
	})
}

func producer(ctx context.Context, db *tocsin.DB) error {
	seq := 0
	log("ready")
	for ctx.Err() == nil {
		log("begin")
		err := db.Tx(ctx, func(tx *tocsin.Tx) error {
			n := 1 + rng.Intn(3)
			for i := 0; i < n; i++ {
				seq++
				h, err := tx.Call(ctx, "crash", "crash.effect", nil, map[string]any{"n": seq, "p": runtime},
					&tocsin.CallOptions{Job: &tocsin.EnqueueOptions{MaxAttempts: 25}})
				if err != nil {
					return err
				}
				if err := tx.Exec(ctx, fmt.Sprintf("INSERT INTO intents(job_id, producer, pid, at) VALUES (%d, 'go', %d, %d)",
					h.JobID, os.Getpid(), time.Now().UnixMilli())); err != nil {
					return err
				}
			}
			pause(0, 10) // a SIGKILL here commits nothing
			return nil
		})
		if err != nil {
			return err
		}
		log("commit")
		pause(20, 60)
	}
	return nil
}

func main() {
	mode, dbPath, logDir := os.Args[1], os.Args[2], os.Args[3]
	seed, _ := strconv.ParseInt(os.Args[4], 10, 64)
	rng = rand.New(rand.NewSource(seed))
	var err error
	logFd, err = os.OpenFile(filepath.Join(logDir, fmt.Sprintf("%s-%s-%d.log", runtime, mode, os.Getpid())),
		os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		panic(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	db, err := tocsin.Open(dbPath, nil)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	switch mode {
	case "consumer":
		err = consumer(ctx, db)
	case "worker-tasktx":
		err = workerTaskTx(ctx, db)
	case "producer":
		err = producer(ctx, db)
	case "scen":
		err = scen(ctx, db)
	case "scen-enqueue":
		err = scenEnqueue(ctx, db, logDir)
	default:
		err = runSoak(ctx, db, mode)
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "go peer %s: %v\n", mode, err)
		os.Exit(1)
	}
}
