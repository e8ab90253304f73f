// Command shop is the Go part of `make demo`: a Go service records an order and, in the
// same transaction, calls the Python task send_email by name (a Python worker runs it);
// it runs a Go worker for its own typed task "invoice", which a Python program calls.
//
//	go run ./examples/shop DB          (bindings/go/demo.sh starts the Python side)
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

type Invoice struct {
	Order int `json:"order"`
	Total int `json:"total"`
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, err := tocsin.Open(os.Args[1], nil)
	if err != nil {
		panic(err)
	}
	defer db.Close()

	// a Go task that any runtime can call by name
	tocsin.Task(db, "invoice", func(ctx context.Context, in Invoice) (map[string]any, error) {
		return map[string]any{"invoice": fmt.Sprintf("INV-%04d", in.Order), "total": in.Total}, nil
	}, &tocsin.TaskOptions{Queue: "go-invoices"})
	w, err := db.NewWorker(tocsin.WorkerOptions{Concurrency: 2,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		panic(err)
	}
	wctx, stopWorker := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- w.Run(wctx) }()

	// the order and the Python task call commit together
	if err := db.Exec(ctx, "CREATE TABLE IF NOT EXISTS orders(id INTEGER PRIMARY KEY, item TEXT)"); err != nil {
		panic(err)
	}
	var h *tocsin.TaskHandle
	err = db.Tx(ctx, func(tx *tocsin.Tx) error {
		if err := tx.Exec(ctx, "INSERT INTO orders(item) VALUES ('go gopher plush')"); err != nil {
			return err
		}
		h, err = tx.Call(ctx, "emails", "send_email", []any{"go gopher plush"}, map[string]any{"to": "gopher@example.org"}, nil)
		return err
	})
	if err != nil {
		panic(err)
	}
	var sent map[string]any
	if err := h.Get(ctx, &sent); err != nil {
		panic(err)
	}
	fmt.Printf("go: the Python worker ran send_email (job %d): %v\n", h.JobID, sent)

	// wait for the Python program's call of "invoice" (demo.sh), then stop gracefully
	l, err := db.Listen(ctx, "demo-go", nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("go: worker ready")
	os.Stdout.Sync()
	select {
	case m := <-l.C:
		fmt.Printf("go: python says %s\n", m.Payload)
	case <-ctx.Done():
	}
	stopWorker()
	if err := <-done; err != nil {
		panic(err)
	}
	fmt.Println("go: worker stopped gracefully")
}
