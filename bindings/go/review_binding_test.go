package tocsin_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

// A task whose Args is a slice, called with no arguments (args [], kwargs {}: what a
// no-argument call of any runtime sends), gets an empty slice: it failed with
// InvalidArguments (decoding {} into []int). Struct and map Args still get {}.
func TestTaskNoArgumentsSliceArgs(t *testing.T) {
	db := openDB(t)
	o := &tocsin.TaskOptions{Queue: "w"}
	tocsin.Task(db, "slice", func(ctx context.Context, a []int) (int, error) { return len(a) + 100, nil }, o)
	tocsin.Task(db, "array", func(ctx context.Context, a [0]string) (int, error) { return 200, nil }, o)
	tocsin.Task(db, "struct", func(ctx context.Context, a EmailArgs) (string, error) { return "to:" + a.To, nil }, o)
	tocsin.Task(db, "map", func(ctx context.Context, a map[string]int) (int, error) { return len(a) + 300, nil }, o)
	tocsin.Task(db, "string", func(ctx context.Context, a string) (string, error) { return a, nil }, o)
	stop := runWorker(t, db, tocsin.WorkerOptions{})
	defer stop()
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	get := func(task string, args []any, kwargs map[string]any) (json.RawMessage, error) {
		h := must(db.Call(ctx, "w", task, args, kwargs, nil))
		var v json.RawMessage
		err := h.Get(ctx, &v)
		return v, err
	}
	for _, c := range []struct {
		task string
		args []any
		want string
	}{
		{"slice", nil, "100"}, {"slice", []any{}, "100"}, {"slice", []any{1, 2, 3}, "103"},
		{"array", nil, "200"}, {"struct", nil, `"to:"`}, {"map", nil, "300"},
	} {
		v, err := get(c.task, c.args, nil)
		if err != nil || string(v) != c.want {
			t.Errorf("%s(%v): got %s, %v; want %s", c.task, c.args, v, err, c.want)
		}
	}
	// a task that needs an argument still refuses a call without one
	_, err := get("string", nil, nil)
	var te *tocsin.TaskError
	if !errors.As(err, &te) || te.Type != "InvalidArguments" {
		t.Errorf("string(): want InvalidArguments, got %v", err)
	}
}
