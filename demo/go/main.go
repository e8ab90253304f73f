// Command stock is the Go worker of `make demo`: it runs the task "reserve_stock" that
// the Python web request calls by name.  stock DB   (stops on SIGTERM)
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

type line struct {
	Order int    `json:"order"`
	Item  string `json:"item"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	db, err := tocsin.Open(os.Args[1], nil)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	tocsin.Task(db, "reserve_stock", func(ctx context.Context, l line) (map[string]any, error) {
		return map[string]any{"reserved": l.Item, "order": l.Order, "runtime": "go", "pid": os.Getpid()}, nil
	}, &tocsin.TaskOptions{Queue: "stock"})
	w, err := db.NewWorker(tocsin.WorkerOptions{Concurrency: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	fmt.Printf("go (pid %d): worker for reserve_stock ready\n", os.Getpid())
	if err := w.Run(ctx); err != nil {
		panic(err)
	}
}
