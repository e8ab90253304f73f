// Command bundledcheck is the unsafe setup on purpose: mattn/go-sqlite3 built without
// -tags libsqlite3 compiles its own SQLite into the program. tocsin.Open must refuse
// with ErrSQLiteCopy (make test-go runs it; docs/architecture.md, "Go").
package main

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	_ "github.com/mattn/go-sqlite3"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

func main() {
	dir, err := os.MkdirTemp("", "bundledcheck")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "x.db")
	sdb, _ := sql.Open("sqlite3", path)
	defer sdb.Close()
	var ver string
	if err := sdb.QueryRow("SELECT sqlite_version()").Scan(&ver); err != nil {
		panic(err)
	}
	info := tocsin.SQLite()
	fmt.Printf("database/sql SQLite %s; tocsin's SQLite %s from %s\n", ver, info.Version, info.Library)
	_, err = tocsin.Open(path, nil)
	if !errors.Is(err, tocsin.ErrSQLiteCopy) {
		fmt.Println("FAIL: Open did not refuse the bundled SQLite:", err)
		os.Exit(1)
	}
	fmt.Println("refused:", err)
}
