//go:build libsqlite3

package tocsin_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
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
