//go:build libsqlite3

package tocsin_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

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
