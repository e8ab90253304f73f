package tocsin

/*
#cgo CFLAGS: -std=c11 -DTOCSIN_EMBED -fvisibility=hidden -O2
#cgo LDFLAGS: -lsqlite3 -lpthread -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include "tocsin.h"

// The probe answers with an address of this copy of SQLite's process image, so a
// database/sql connection can prove it runs on the SQLite tocsin links (one copy).
static int go_probe_anchor;
static void go_probe(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
	(void)argc; (void)argv;
	sqlite3_result_int64(ctx, (sqlite3_int64)(intptr_t)&go_probe_anchor);
}
static int go_probe_init(sqlite3 *conn, char **err, const void *api) {
	(void)err; (void)api;
	return sqlite3_create_function_v2(conn, "tocsin_go_probe", 0, SQLITE_UTF8 | SQLITE_DIRECTONLY,
	                                  NULL, go_probe, NULL, NULL, NULL);
}
static int64_t go_probe_value(void) { return (int64_t)(intptr_t)&go_probe_anchor; }

// Every connection opened by this process's SQLite from now on gets the tocsin SQL
// functions and the probe (sqlite3_auto_extension).
static int go_auto_extension(void) {
	int rc = sqlite3_auto_extension((void (*)(void))tocsin_sql_init);
	if (rc == SQLITE_OK) rc = sqlite3_auto_extension((void (*)(void))go_probe_init);
	return rc;
}

// The file that provides the SQLite tocsin calls (the shared libsqlite3, or the
// executable when a driver compiled its own copy into it).
static const char *go_sqlite_image(void) {
	Dl_info info;
	if (dladdr((void *)sqlite3_libversion, &info) && info.dli_fname) return info.dli_fname;
	return "";
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"strings"
	"unsafe"
)

func init() {
	if rc := C.go_auto_extension(); rc != 0 {
		panic("tocsin: sqlite3_auto_extension failed")
	}
}

// lastError reads the calling thread's error channel; the caller has locked the OS thread
// since the failing call.
func lastError(rc C.int, op string) error {
	code := int(C.tocsin_errcode(nil))
	if code == 0 {
		code = int(rc)
	}
	return &Error{
		Code:       Code(code),
		SQLiteCode: int(C.tocsin_sqlite_errcode(nil)),
		Message:    C.GoString(C.tocsin_errmsg(nil)),
		Op:         op,
	}
}

// call runs one C call and reads its error on the same OS thread.
func call(op string, f func() C.int) error {
	runtime.LockOSThread()
	rc := f()
	if rc == 0 {
		runtime.UnlockOSThread()
		return nil
	}
	err := lastError(rc, op)
	runtime.UnlockOSThread()
	return err
}

// cstrings holds the C copies of one call's string arguments. A Go string with a NUL
// byte has no C form (C.CString would cut it there, and "a\x00b" would name "a"):
// the first one is kept as err, and the call is refused (ErrInvalid) before it runs.
type cstrings struct {
	ps  []*C.char
	nul string // the first argument holding a NUL byte
	bad bool
}

func (cs *cstrings) str(s string) *C.char {
	if !cs.bad && strings.IndexByte(s, 0) >= 0 {
		cs.bad, cs.nul = true, s
	}
	p := C.CString(s)
	cs.ps = append(cs.ps, p)
	return p
}

// opt is NULL for "".
func (cs *cstrings) opt(s string) *C.char {
	if s == "" {
		return nil
	}
	return cs.str(s)
}

// check is ErrInvalid, naming the argument, when one of the strings holds a NUL byte.
func (cs *cstrings) check(op string) error {
	if !cs.bad {
		return nil
	}
	q := cs.nul
	if len(q) > 64 {
		q = q[:64] + "..."
	}
	return newErr(ErrInvalid, op, fmt.Sprintf("text argument %q contains a NUL byte (refused, not cut at the NUL)", q))
}

func (cs *cstrings) free() {
	for _, p := range cs.ps {
		C.free(unsafe.Pointer(p))
	}
	cs.ps = cs.ps[:0]
}

func goStr(p *C.char) string {
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

// SQLiteInfo describes the SQLite that tocsin runs on.
type SQLiteInfo struct {
	Version  string // sqlite3_libversion()
	SourceID string // sqlite3_sourceid()
	Library  string // the file that provides it (the shared libsqlite3 in the safe setup)
}

// SQLite reports the SQLite this process's tocsin runs on.
func SQLite() SQLiteInfo {
	return SQLiteInfo{
		Version:  C.GoString(C.sqlite3_libversion()),
		SourceID: C.GoString(C.sqlite3_sourceid()),
		Library:  C.GoString(C.go_sqlite_image()),
	}
}

// Version is the tocsin core's version; VersionNumber its number (major*1e6+minor*1e3+patch).
func Version() string    { return C.GoString(C.tocsin_version()) }
func VersionNumber() int { return int(C.tocsin_version_number()) }

func probeValue() int64 { return int64(C.go_probe_value()) }
