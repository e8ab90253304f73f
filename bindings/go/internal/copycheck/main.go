// Command copycheck loads a second copy of SQLite as a shared object (the system
// library under another name, as a driver or plugin bundling its own would) beside
// the libsqlite3 tocsin runs on. tocsin.Open must refuse with ErrSQLiteCopy naming it,
// open with Options.AllowStaticSQLite, and open again once the copy is unloaded
// (make test-go runs it; docs/architecture.md, "Go").
package main

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

func fail(format string, args ...any) {
	fmt.Printf("FAIL: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	dir, err := os.MkdirTemp("", "copycheck")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "x.db")
	lib := tocsin.SQLite().Library
	data, err := os.ReadFile(lib)
	if err != nil {
		fail("cannot read tocsin's SQLite %q: %v", lib, err)
	}
	copyPath := filepath.Join(dir, "libbundled-sqlite.so")
	if err := os.WriteFile(copyPath, data, 0o644); err != nil {
		panic(err)
	}
	cp := C.CString(copyPath)
	defer C.free(unsafe.Pointer(cp))
	h := C.dlopen(cp, C.RTLD_NOW|C.RTLD_LOCAL)
	if h == nil {
		fail("dlopen %s: %s", copyPath, C.GoString(C.dlerror()))
	}
	_, err = tocsin.Open(path, nil)
	if !errors.Is(err, tocsin.ErrSQLiteCopy) || !strings.Contains(err.Error(), copyPath) {
		fail("Open did not refuse the second copy by name: %v", err)
	}
	fmt.Println("refused:", err)
	db, err := tocsin.Open(path, &tocsin.Options{AllowStaticSQLite: true})
	if err != nil {
		fail("Open with AllowStaticSQLite: %v", err)
	}
	db.Close()
	C.dlclose(h)
	db, err = tocsin.Open(path, nil)
	if err != nil {
		fail("Open once the copy is unloaded: %v", err)
	}
	db.Close()
	fmt.Println("ok: allowed when told, and fine once the copy is unloaded")
}
