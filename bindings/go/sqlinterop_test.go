//go:build libsqlite3

// The one-SQLite-per-process setup (docs/architecture.md, "Go"): mattn/go-sqlite3 built
// with -tags libsqlite3 and tocsin share the system libsqlite3, so an application's
// database/sql transaction can enqueue, publish and notify through tocsin's SQL
// functions, and tocsin claims the job, on one file in one process.
package tocsin_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

func TestDatabaseSQLOneProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	db := openDB2(t, path)
	sdb, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=5000&_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	var ver string
	if err := sdb.QueryRow("SELECT sqlite_version()").Scan(&ver); err != nil || ver != tocsin.SQLite().Version {
		t.Fatalf("database/sql runs SQLite %q, tocsin %q (%v)", ver, tocsin.SQLite().Version, err)
	}
	if _, err := sdb.Exec("CREATE TABLE orders(id INTEGER PRIMARY KEY, total INTEGER)"); err != nil {
		t.Fatal(err)
	}
	// commit: the order and its job together
	tx, err := sdb.BeginTx(bg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO orders(total) VALUES (990)"); err != nil {
		t.Fatal(err)
	}
	id, err := tocsin.EnqueueTx(bg, tx, "emails", map[string]int{"order": 1}, &tocsin.EnqueueOptions{Priority: 3, Meta: map[string]string{"trace": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	off := must(tocsin.PublishTx(bg, tx, "orders", map[string]int{"id": 1}, &tocsin.PublishOptions{Key: "k"}))
	nid := must(tocsin.NotifyTx(bg, tx, "orders", map[string]int{"id": 1}, nil))
	cid := must(tocsin.CallTx(bg, tx, "tasks", "send_email", []any{"ann@example.com"}, map[string]any{"subject": "hi"},
		&tocsin.CallOptions{ResultTTL: time.Minute, Job: &tocsin.EnqueueOptions{MaxAttempts: 4}}))
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// rollback: neither
	tx, _ = sdb.BeginTx(bg, nil)
	tx.Exec("INSERT INTO orders(total) VALUES (1)")
	if _, err := tocsin.EnqueueTx(bg, tx, "emails", 2, nil); err != nil {
		t.Fatal(err)
	}
	tx.Rollback()
	// bad input: the SQL function's error (ErrInvalid, as through Enqueue), nothing written
	_, err = tocsin.EnqueueTx(bg, sdb, "", 1, nil)
	if !errors.Is(err, tocsin.ErrInvalid) {
		t.Fatal(err)
	}

	j := must(db.Queue("emails").ClaimOne(bg, "w", time.Minute))
	if j.ID != id || j.Priority != 3 || string(j.Meta) != `{"trace":"x"}` {
		t.Fatalf("%+v", j)
	}
	check(t, db.Queue("emails").Ack(bg, j))
	if st := must(db.Queue("emails").Stats(bg)); st.Pending != 0 {
		t.Fatalf("the rolled back job is there: %+v", st)
	}
	if evs := must(db.Stream("orders").Read(bg, 0, 10)); len(evs) != 1 || evs[0].ID != off || evs[0].Key != "k" {
		t.Fatalf("%+v", evs)
	}
	if ns := must(db.Notifications(bg, "orders", 0, 10)); len(ns) != 1 || ns[0].ID != nid {
		t.Fatalf("%+v", ns)
	}
	tj := must(db.Job(bg, cid))
	if tj.Queue != "tasks" || tj.MaxAttempts != 4 ||
		string(tj.Payload) != `{"task":"send_email","args":["ann@example.com"],"kwargs":{"subject":"hi"},"result_ttl_ms":60000}` {
		t.Fatalf("%+v %s", tj, tj.Payload)
	}
	var n int
	sdb.QueryRow("SELECT count(*) FROM orders").Scan(&n)
	if n != 1 {
		t.Fatal(n)
	}
	var ic string
	if err := sdb.QueryRow("PRAGMA integrity_check").Scan(&ic); err != nil || ic != "ok" {
		t.Fatal(ic, err)
	}
}
