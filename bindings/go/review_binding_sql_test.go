//go:build libsqlite3

package tocsin_test

import (
	"database/sql"
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
