package tocsin

/*
#include <stdlib.h>
#include <sqlite3.h>

// A private in-memory connection of tocsin's SQLite (the tocsin SQL functions are on
// it: sqlite3_auto_extension), with the tocsin tables installed, on which a failed
// call of a database/sql helper is tried again: see sqlArgumentError.
static sqlite3 *go_chk;

static int go_chk_open(void) {
	if (go_chk) return SQLITE_OK;
	if (sqlite3_open_v2(":memory:", &go_chk, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK ||
	    sqlite3_exec(go_chk, "SELECT tocsin_bootstrap()", NULL, NULL, NULL) != SQLITE_OK) {
		sqlite3_close(go_chk);
		go_chk = NULL;
		return SQLITE_ERROR;
	}
	return SQLITE_OK;
}

// Runs sql with n text (or NULL) parameters inside a savepoint it rolls back: the
// primary result code of the statement (SQLITE_OK when it succeeded), -1 when the
// check itself could not run.
static int go_chk_run(const char *sql, int n, char **vals, int *lens) {
	sqlite3_stmt *st = NULL;
	int rc, i;
	if (go_chk_open() != SQLITE_OK) return -1;
	if (sqlite3_exec(go_chk, "SAVEPOINT go_chk", NULL, NULL, NULL) != SQLITE_OK) return -1;
	rc = sqlite3_prepare_v2(go_chk, sql, -1, &st, NULL);
	if (rc == SQLITE_OK) {
		for (i = 0; i < n && rc == SQLITE_OK; i++)
			rc = vals[i] ? sqlite3_bind_text(st, i + 1, vals[i], lens[i], SQLITE_TRANSIENT)
			             : sqlite3_bind_null(st, i + 1);
		if (rc == SQLITE_OK) {
			rc = sqlite3_step(st);
			if (rc == SQLITE_ROW || rc == SQLITE_DONE) rc = SQLITE_OK;
		} else {
			rc = -1;
		}
	} else {
		rc = -1;
	}
	sqlite3_finalize(st);
	sqlite3_exec(go_chk, "ROLLBACK TO go_chk", NULL, NULL, NULL);
	sqlite3_exec(go_chk, "RELEASE go_chk", NULL, NULL, NULL);
	return rc < 0 ? rc : (rc & 0xff);
}
*/
import "C"

import (
	"sync"
	"unsafe"
)

var chkMu sync.Mutex

// sqlArgumentError tells whether a database/sql helper's call that failed with
// SQLITE_ERROR failed on its arguments. The SQL functions report every invalid argument
// they do not give a code of its own (a bad name, invalid JSON, an unknown option, a NUL
// character, text that is not UTF-8) with SQLITE_ERROR, as they do SQLite's own failures
// (docs/sql.md, "Errors"): to tell them apart, the same call runs again, rolled back, on a
// private in-memory database with the tocsin tables. A call that fails there with
// SQLITE_ERROR too failed on its arguments (the core's judgement, on a database where
// nothing else can fail): ErrInvalid, as the native calls report it. args are strings or
// nil, as the helpers pass them.
func sqlArgumentError(expr string, args []any) bool {
	n := len(args)
	vals := make([]*C.char, n+1)
	lens := make([]C.int, n+1)
	for i, a := range args {
		s, ok := a.(string)
		if !ok {
			if a != nil {
				return false // not a call of the helpers' shape
			}
			continue
		}
		vals[i] = (*C.char)(C.CBytes([]byte(s + "\x00")))
		lens[i] = C.int(len(s))
	}
	defer func() {
		for _, p := range vals {
			if p != nil {
				C.free(unsafe.Pointer(p))
			}
		}
	}()
	sql := C.CString("SELECT " + expr)
	defer C.free(unsafe.Pointer(sql))
	chkMu.Lock()
	rc := C.go_chk_run(sql, C.int(n), &vals[0], &lens[0])
	chkMu.Unlock()
	return rc == 1 // SQLITE_ERROR
}
