//go:build libsqlite3

package tocsin_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mattn/go-sqlite3"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

// The database/sql helpers keep the driver's error: the context's error and the
// driver's SQLite code stay reachable with errors.Is / errors.As.
func TestSQLHelperErrorsUnwrap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	openDB2(t, path)
	sdb, err := sql.Open("sqlite3", path)
	check(t, err)
	defer sdb.Close()
	ctx, cancel := context.WithCancel(bg)
	cancel()
	_, err = tocsin.EnqueueTx(ctx, sdb, "q", 1, nil)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, tocsin.ErrInterrupted) {
		t.Fatalf("want context.Canceled and ErrInterrupted, got %v", err)
	}
	_, err = tocsin.EnqueueTx(bg, sdb, "", 1, nil)
	var se sqlite3.Error
	if !errors.As(err, &se) || se.Code != sqlite3.ErrError {
		t.Fatalf("the driver's error is not reachable: %v", err)
	}
	tx, err := sdb.Begin()
	check(t, err)
	check(t, tx.Rollback())
	_, err = tocsin.NotifyTx(bg, tx, "c", 1, nil)
	if !errors.Is(err, sql.ErrTxDone) {
		t.Fatalf("want sql.ErrTxDone, got %v", err)
	}
}

// argsQuerier rewrites the arguments of the helper's query before it runs: it passes
// values the typed Go API never sends (a NULL queue, a blob, raw options).
type argsQuerier struct {
	tocsin.Querier
	edit func(args []any)
}

func (q argsQuerier) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	args = append([]any(nil), args...)
	q.edit(args)
	return q.Querier.QueryRowContext(ctx, query, args...)
}

// The helpers' errors follow the SQLite result code of the SQL function's error
// (docs/sql.md, "Errors"), read from the driver's error without importing the driver.
func TestSQLHelperErrorCodes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	db := openDB2(t, path)
	sdb, err := sql.Open("sqlite3", path)
	check(t, err)
	defer sdb.Close()
	opts := func(o string) argsQuerier { return argsQuerier{sdb, func(a []any) { a[2] = o }} }
	for _, c := range []struct {
		name string
		call func() (int64, error)
		code tocsin.Code
		sc   int
		msg  string
	}{
		{"max_attempts out of range", func() (int64, error) {
			return tocsin.EnqueueTx(bg, sdb, "q", 1, &tocsin.EnqueueOptions{MaxAttempts: 1000001})
		}, tocsin.ErrInvalid, 25, `option "max_attempts" must be between 1 and 1000000`},
		{"priority beyond int64", func() (int64, error) {
			return tocsin.EnqueueTx(bg, opts(`{"priority":99999999999999999999}`), "q", 1, nil)
		}, tocsin.ErrInvalid, 25, `option "priority"`},
		{"NULL queue", func() (int64, error) {
			return tocsin.EnqueueTx(bg, argsQuerier{sdb, func(a []any) { a[0] = nil }}, "q", 1, nil)
		}, tocsin.ErrInvalid, 20, "queue must not be NULL"},
		{"blob topic", func() (int64, error) {
			return tocsin.PublishTx(bg, argsQuerier{sdb, func(a []any) { a[0] = []byte("t") }}, "t", 1, nil)
		}, tocsin.ErrInvalid, 20, "topic must be text, not a blob"},
		{"ill-typed option", func() (int64, error) {
			return tocsin.EnqueueTx(bg, opts(`{"delay_ms":"soon"}`), "q", 1, nil)
		}, tocsin.ErrInvalid, 20, `option "delay_ms" must be an integer`},
		{"oversize payload", func() (int64, error) {
			return tocsin.NotifyTx(bg, sdb, "c", strings.Repeat("x", 1<<20), nil)
		}, tocsin.ErrTooBig, 18, "the limit is 1048576 bytes"},
		// (raw options the typed API never sends, swapped in by the Querier: the helper
		// judges the arguments it passed, which are valid, so this SQLITE_ERROR stays
		// ErrFailed)
		{"unknown option", func() (int64, error) {
			return tocsin.EnqueueTx(bg, opts(`{"priorty":1}`), "q", 1, nil)
		}, tocsin.ErrFailed, 1, `unknown option "priorty"`},
		{"empty queue name", func() (int64, error) {
			return tocsin.CallTx(bg, sdb, "", "send", nil, nil, nil)
		}, tocsin.ErrInvalid, 1, "tocsin_task_enqueue: "},
	} {
		_, err := c.call()
		var e *tocsin.Error
		if !errors.As(err, &e) || !errors.Is(err, c.code) || e.SQLiteCode != c.sc || !strings.Contains(e.Message, c.msg) {
			t.Errorf("%s: want %v with SQLite code %d and %q, got %#v", c.name, c.code, c.sc, c.msg, err)
			continue
		}
		var se sqlite3.Error
		if !errors.As(err, &se) || int(se.Code) != c.sc {
			t.Errorf("%s: the driver's error is not reachable: %v", c.name, err)
		}
	}
	// a read-only connection, and the write lock held past the busy timeout (the SQL
	// function waits the core's default budget, 5 s, whatever the connection's timeout)
	ro, err := sql.Open("sqlite3", "file:"+path+"?mode=ro")
	check(t, err)
	defer ro.Close()
	_, err = tocsin.EnqueueTx(bg, ro, "q", 1, nil)
	var e *tocsin.Error
	if !errors.As(err, &e) || !errors.Is(err, tocsin.ErrReadOnly) || e.SQLiteCode&0xff != 8 {
		t.Errorf("read-only: want ErrReadOnly with SQLite code 8, got %#v", err)
	}
	holder, err := sql.Open("sqlite3", "file:"+path+"?_txlock=immediate")
	check(t, err)
	defer holder.Close()
	tx, err := holder.Begin()
	check(t, err)
	defer tx.Rollback()
	busy, err := sql.Open("sqlite3", path)
	check(t, err)
	defer busy.Close()
	_, err = tocsin.EnqueueTx(bg, busy, "q", 1, nil)
	if !errors.As(err, &e) || !errors.Is(err, tocsin.ErrBusy) || e.SQLiteCode&0xff != 5 || !strings.Contains(e.Message, "database is locked") {
		t.Errorf("busy: want ErrBusy with SQLite code 5, got %#v", err)
	}
	check(t, tx.Rollback())
	if st := must(db.Queue("q").Stats(bg)); st.Pending != 0 {
		t.Fatalf("a refused call wrote: %+v", st)
	}
}

// codeMethodErr is an error shaped like modernc.org/sqlite's *sqlite.Error.
type codeMethodErr struct{ code int }

func (e *codeMethodErr) Error() string { return "sqlite error" }
func (e *codeMethodErr) Code() int     { return e.code }

// The SQLite code is found through wrapping, on a Code() int method or on mattn's fields.
func TestSQLHelperDriverCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{&codeMethodErr{25}, 25},
		{fmt.Errorf("exec: %w", &codeMethodErr{18}), 18},
		{sqlite3.Error{Code: sqlite3.ErrMismatch}, 20},
		{fmt.Errorf("a: %w", fmt.Errorf("b: %w", sqlite3.Error{Code: sqlite3.ErrBusy, ExtendedCode: sqlite3.ErrBusySnapshot})), 517},
		{&sqlite3.Error{Code: sqlite3.ErrRange}, 25},
		{errors.New("no code"), 0},
		{context.Canceled, 0},
		{nil, 0},
	} {
		if got := tocsin.DriverCode(c.err); got != c.want {
			t.Errorf("DriverCode(%#v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// EnqueueTx refuses a unique key that encoding/json would alter (invalid UTF-8 becomes
// U+FFFD, so "\xff" and "\xfe" would dedup as one key) or a NUL, as Enqueue does; nothing
// is written.
func TestSQLHelperUniqueKeyRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	db := openDB2(t, path)
	sdb, err := sql.Open("sqlite3", path)
	check(t, err)
	defer sdb.Close()
	for _, k := range []string{"\xff", "a\x00b"} {
		_, err := tocsin.EnqueueTx(bg, sdb, "q", 1, &tocsin.EnqueueOptions{UniqueKey: k})
		wantCode(t, err, tocsin.ErrInvalid)
		if !strings.Contains(err.Error(), "unique_key") {
			t.Fatalf("the error does not name the option: %v", err)
		}
		_, err = tocsin.CallTx(bg, sdb, "q", "t", nil, nil, &tocsin.CallOptions{Job: &tocsin.EnqueueOptions{UniqueKey: k}})
		wantCode(t, err, tocsin.ErrInvalid)
	}
	st, err := db.Queue("q").Stats(bg)
	check(t, err)
	if st.Pending != 0 {
		t.Fatalf("a refused call wrote %d jobs", st.Pending)
	}
}
