package tocsin_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

// python is the interpreter with the tocsin Python package (make test-go sets it).
func python(t *testing.T) string {
	p := os.Getenv("TOCSIN_TEST_PYTHON")
	if p == "" {
		t.Skip("TOCSIN_TEST_PYTHON is not set (make test-go sets it to build/venv)")
	}
	return p
}

const pyTasks = `import os, tocsin
db = tocsin.open(os.environ["TOCSIN_DB"])
q = db.queue("py")

@q.task(name="py_add")
def py_add(a, b=0):
    return {"sum": a + b}

@q.task(name="py_fail", retries=0)
def py_fail():
    raise ValueError("python says no")
`

// A Python worker runs tasks a Go program calls by name; Go reads values and errors.
func TestGoCallsPythonTask(t *testing.T) {
	py := python(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "x.db")
	db := openDB2(t, path)
	check(t, os.WriteFile(filepath.Join(dir, "pytasks.py"), []byte(pyTasks), 0o644))
	cmd := exec.Command(py, "-m", "tocsin", "worker", "pytasks:db", "--queue", "py", "--no-scheduler", "--shutdown-timeout", "1")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TOCSIN_DB="+path)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	check(t, cmd.Start())
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	h := must(db.Call(bg, "py", "py_add", []any{2}, map[string]any{"b": 3}, nil))
	var v struct{ Sum int }
	if err := h.Get(ctx, &v); err != nil || v.Sum != 5 {
		t.Fatalf("%+v %v\n%s", v, err, out.String())
	}
	hf := must(db.Call(bg, "py", "py_fail", nil, nil, nil))
	err := hf.Get(ctx, &v)
	te, ok := err.(*tocsin.TaskError)
	if !ok || te.Type != "ValueError" || te.Message != "python says no" {
		t.Fatalf("%v\n%s", err, out.String())
	}
}

const pyCaller = `import json, os, sys, tocsin
db = tocsin.open(os.environ["TOCSIN_DB"])
h = db.queue("go").call("go_mul", kwargs={"x": 6})
print(json.dumps(h.get(timeout=30)))
try:
    db.queue("go").call("go_mul", kwargs={"x": -1}).get(timeout=30)
except tocsin.TaskError as e:
    print(e.type, e.message)
`

// A Go worker runs a task a Python program calls by name (kwargs -> Args struct).
func TestPythonCallsGoTask(t *testing.T) {
	py := python(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "x.db")
	db := openDB2(t, path)
	tocsin.Task(db, "go_mul", func(ctx context.Context, a struct {
		X int `json:"x"`
	}) (map[string]int, error) {
		if a.X < 0 {
			return nil, tocsin.Permanent(&tocsin.TaskError{Type: "NegativeError", Message: "x < 0"})
		}
		return map[string]int{"product": a.X * 7}, nil
	}, &tocsin.TaskOptions{Queue: "go"})
	stop := runWorker(t, db, tocsin.WorkerOptions{Queues: []string{"go"}})
	defer stop()
	check(t, os.WriteFile(filepath.Join(dir, "caller.py"), []byte(pyCaller), 0o644))
	cmd := exec.Command(py, "caller.py")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TOCSIN_DB="+path)
	outb, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, outb)
	}
	if got := string(outb); got != "{\"product\": 42}\nNegativeError x < 0\n" {
		t.Fatalf("%q", got)
	}
}
