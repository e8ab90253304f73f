package tocsin_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

func exampleDB() (*tocsin.DB, func()) {
	dir, _ := os.MkdirTemp("", "tocsin-example")
	db, err := tocsin.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		panic(err)
	}
	return db, func() { db.Close(); os.RemoveAll(dir) }
}

// Enqueue a job in the same transaction as the business row, then claim and ack it.
func Example() {
	db, cleanup := exampleDB()
	defer cleanup()
	ctx := context.Background()

	_ = db.Exec(ctx, "CREATE TABLE orders(id INTEGER PRIMARY KEY, total INTEGER)")
	err := db.Tx(ctx, func(tx *tocsin.Tx) error {
		if err := tx.Exec(ctx, "INSERT INTO orders(total) VALUES (990)"); err != nil {
			return err
		}
		_, err := tx.Queue("emails").Enqueue(ctx, map[string]any{"order": 1}, &tocsin.EnqueueOptions{Priority: 5})
		return err // nil commits both; an error rolls both back
	})
	if err != nil {
		panic(err)
	}

	q := db.Queue("emails")
	job, err := q.ClaimOne(ctx, "worker-1", 30*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("claimed", string(job.Payload), "attempt", job.Attempts)
	if err := q.Ack(ctx, job); err != nil {
		panic(err) // errors.Is(err, tocsin.ErrLeaseLost) when another worker took the job over
	}
	// Output: claimed {"order":1} attempt 1
}

// A typed task, run by a Worker; any runtime can call "send_email" by name and read its result.
func ExampleTask() {
	db, cleanup := exampleDB()
	defer cleanup()
	ctx := context.Background()

	type Email struct {
		To string `json:"to"`
	}
	send := tocsin.Task(db, "send_email", func(ctx context.Context, e Email) (string, error) {
		return "sent to " + e.To, nil
	}, &tocsin.TaskOptions{Queue: "emails"})

	w, err := db.NewWorker(tocsin.WorkerOptions{Concurrency: 4, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- w.Run(wctx) }() // stop() shuts it down gracefully

	h, err := send.Call(ctx, Email{To: "ann@example.com"}, nil)
	if err != nil {
		panic(err)
	}
	res, err := h.Get(ctx)
	fmt.Println(res, err)

	// the same task by name, as a Python or Node program calls it (keyword arguments)
	h2, _ := db.Call(ctx, "emails", "send_email", nil, map[string]any{"to": "bob@example.com"}, nil)
	var s string
	fmt.Println(h2.Get(ctx, &s), s)

	stop()
	<-done
	// Output:
	// sent to ann@example.com <nil>
	// <nil> sent to bob@example.com
}

// NOTIFY/LISTEN: the listener ends when its context ends.
func ExampleDB_Listen() {
	db, cleanup := exampleDB()
	defer cleanup()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	l, err := db.Listen(ctx, "orders", nil)
	if err != nil {
		panic(err)
	}
	_, _ = db.Notify(ctx, "orders", map[string]int{"id": 7}, nil)
	m := <-l.C
	fmt.Println(m.Name, string(m.Payload))
	// Output: orders {"id":7}
}

// A durable stream read with a Go 1.23 iterator: replay from the consumer's saved
// offset, then live events, until the loop breaks or the context ends.
func ExampleStream_Events() {
	db, cleanup := exampleDB()
	defer cleanup()
	ctx := context.Background()
	s := db.Stream("orders")
	_, _ = s.PublishMany(ctx, []any{"a", "b", "c"}, nil)

	n := 0
	// The end of the loop (here a break) saves the consumer's offset: the last event
	// the loop body got (NoSaveOnClose: true leaves it).
	for ev, err := range s.Events(ctx, "billing", nil) {
		if err != nil {
			panic(err)
		}
		fmt.Println(ev.ID, string(ev.Payload))
		if n++; n == 2 {
			break
		}
	}
	off, _ := s.Offset(ctx, "billing")
	fmt.Println("saved offset", off)
	// Output:
	// 1 "a"
	// 2 "b"
	// saved offset 2
}

// Locks with fencing tokens; Acquire waits (reading only) until the lock is free.
func ExampleLock() {
	db, cleanup := exampleDB()
	defer cleanup()
	ctx := context.Background()
	l := db.Lock("nightly-report", "host-a", time.Minute)
	ok, _ := l.TryAcquire(ctx)
	fmt.Println(ok, l.Token())
	_ = l.Release(ctx)
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	fmt.Println(db.Lock("nightly-report", "host-b", time.Minute).Acquire(wctx))
	// Output:
	// true 1
	// <nil>
}
