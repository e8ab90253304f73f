//go:build libsqlite3

package tocsin_test

import (
	"database/sql"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	sqlite3 "github.com/mattn/go-sqlite3"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

// The database/sql helpers give ErrInvalid for every invalid argument, as the native
// calls do, also for those the SQL functions report with SQLITE_ERROR (a bad name, a
// NUL, invalid JSON, an unknown option): they were ErrFailed. The driver's error and its
// SQLite code stay reachable; nothing is written.
func TestSQLHelperInvalidArgumentsAreErrInvalid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	db := openDB2(t, path)
	sdb, err := sql.Open("sqlite3", path)
	check(t, err)
	defer sdb.Close()
	tx, err := sdb.BeginTx(bg, nil)
	check(t, err)
	defer tx.Rollback()
	deep := any(1)
	for range 1001 {
		deep = []any{deep}
	}
	for _, c := range []struct {
		name string
		call func() (int64, error)
		msg  string
	}{
		{"EnqueueTx empty queue", func() (int64, error) { return tocsin.EnqueueTx(bg, tx, "", 1, nil) }, "queue name must not be empty"},
		{"EnqueueTx NUL in queue", func() (int64, error) { return tocsin.EnqueueTx(bg, tx, "a\x00b", 1, nil) }, "NUL"},
		{"EnqueueTx invalid JSON", func() (int64, error) { return tocsin.EnqueueTx(bg, tx, "q", json.RawMessage("{bad"), nil) }, "JSON"},
		{"PublishTx empty topic", func() (int64, error) { return tocsin.PublishTx(bg, tx, "", 1, nil) }, "topic"},
		{"PublishTx bad key", func() (int64, error) { return tocsin.PublishTx(bg, tx, "t", 1, &tocsin.PublishOptions{Key: "a\x01"}) }, "key"},
		{"NotifyTx empty channel", func() (int64, error) { return tocsin.NotifyTx(bg, tx, "", 1, nil) }, "channel"},
		{"CallTx empty queue", func() (int64, error) { return tocsin.CallTx(bg, tx, "", "send", nil, nil, nil) }, "tocsin_task_enqueue: "},
		{"CallTx empty task", func() (int64, error) { return tocsin.CallTx(bg, tx, "q", "", nil, nil, nil) }, "task"},
		{"CallTx args nested too deep", func() (int64, error) {
			return tocsin.CallTx(bg, tx, "q", "t", []any{deep}, nil, nil)
		}, "tocsin_task_enqueue: "},
	} {
		_, err := c.call()
		var e *tocsin.Error
		if !errors.As(err, &e) || !errors.Is(err, tocsin.ErrInvalid) || errors.Is(err, tocsin.ErrFailed) ||
			e.SQLiteCode&0xff != 1 || !strings.Contains(e.Message, c.msg) {
			t.Errorf("%s: want ErrInvalid with SQLite code 1 and %q, got %#v", c.name, c.msg, err)
			continue
		}
		var se sqlite3.Error
		if !errors.As(err, &se) || se.Code != sqlite3.ErrError {
			t.Errorf("%s: the driver's error is not reachable: %v", c.name, err)
		}
	}
	// the application's transaction is still usable, and nothing was written
	id, err := tocsin.EnqueueTx(bg, tx, "q", 1, nil)
	check(t, err)
	check(t, tx.Commit())
	if st := must(db.Queue("q").Stats(bg)); st.Pending != 1 {
		t.Fatalf("want the one valid job (%d): %+v", id, st)
	}
	if st := must(db.Stats(bg)); len(st) != 1 {
		t.Fatalf("a refused call wrote: %+v", st)
	}
	if ev := must(db.Stream("t").Read(bg, 0, 10)); len(ev) != 0 {
		t.Fatalf("a refused call published: %+v", ev)
	}
}

// An SQLITE_ERROR that is not about the arguments stays ErrFailed: here a schema newer
// than the library.
func TestSQLHelperFailureStaysErrFailed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	db := openDB2(t, path)
	check(t, db.Exec(bg, "UPDATE _tocsin_meta SET value = '999' WHERE key = 'schema_version'"))
	sdb, err := sql.Open("sqlite3", path)
	check(t, err)
	defer sdb.Close()
	_, err = tocsin.EnqueueTx(bg, sdb, "q", 1, nil)
	var e *tocsin.Error
	if !errors.As(err, &e) || !errors.Is(err, tocsin.ErrFailed) || e.SQLiteCode&0xff != 1 || !strings.Contains(e.Message, "upgrade tocsin") {
		t.Fatalf("want ErrFailed naming the schema, got %#v", err)
	}
}

// A nil tx -- nil, or a nil *sql.Tx in the interface -- is ErrInvalid naming it (it
// panicked with a nil-pointer dereference).
func TestSQLHelperNilTx(t *testing.T) {
	var nilTx *sql.Tx
	for _, q := range []tocsin.Querier{nil, nilTx} {
		for name, f := range map[string]func() error{
			"EnqueueTx": func() error { _, err := tocsin.EnqueueTx(bg, q, "q", 1, nil); return err },
			"PublishTx": func() error { _, err := tocsin.PublishTx(bg, q, "t", 1, nil); return err },
			"NotifyTx":  func() error { _, err := tocsin.NotifyTx(bg, q, "c", 1, nil); return err },
			"CallTx":    func() error { _, err := tocsin.CallTx(bg, q, "q", "t", nil, nil, nil); return err },
		} {
			wantInvalidNaming(t, name, noPanic(t, name, f), "tx")
		}
	}
}

// A payload string that is not valid UTF-8 is refused by the helpers too (encoding/json
// would store it altered).
func TestSQLHelperInvalidUTF8(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	db := openDB2(t, path)
	sdb, err := sql.Open("sqlite3", path)
	check(t, err)
	defer sdb.Close()
	bad := map[string]string{"name": "caf\xe9"}
	for name, f := range map[string]func() error{
		"EnqueueTx": func() error { _, err := tocsin.EnqueueTx(bg, sdb, "q", bad, nil); return err },
		"EnqueueTx meta": func() error {
			_, err := tocsin.EnqueueTx(bg, sdb, "q", 1, &tocsin.EnqueueOptions{Meta: bad})
			return err
		},
		"PublishTx": func() error { _, err := tocsin.PublishTx(bg, sdb, "t", bad, nil); return err },
		"NotifyTx":  func() error { _, err := tocsin.NotifyTx(bg, sdb, "c", 1, bad); return err },
		"CallTx": func() error {
			_, err := tocsin.CallTx(bg, sdb, "q", "t", nil, map[string]any{"a": bad}, nil)
			return err
		},
	} {
		wantInvalidNaming(t, name, f(), "UTF-8")
	}
	if st := must(db.Stats(bg)); len(st) != 0 {
		t.Fatalf("a refused call wrote: %+v", st)
	}
}
