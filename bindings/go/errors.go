package tocsin

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Code is a tocsin result code (tocsin.h). Each non-zero code is also an error value,
// so errors.Is(err, tocsin.ErrNotFound) matches any *Error with that code.
type Code int

// The codes of tocsin.h, usable with errors.Is.
const (
	ErrFailed      Code = 1  // SQLite or system failure; see Error.SQLiteCode
	ErrInvalid     Code = 2  // an argument was invalid; nothing was written
	ErrNotFound    Code = 3  // the named object does not exist
	ErrBusy        Code = 4  // the database stayed locked past the busy timeout
	ErrLeaseLost   Code = 5  // the caller no longer holds the job/lock lease
	ErrClosed      Code = 6  // the handle or subscription was closed
	ErrCorrupt     Code = 7  // the database or its tocsin schema is damaged
	ErrTooBig      Code = 8  // a payload exceeded the size limit; nothing was written
	ErrVersion     Code = 9  // SQLite too old, or schema newer than this library
	ErrCallback    Code = 10 // a callback of the host language raised
	ErrNoMem       Code = 11 // out of memory
	ErrReplaced    Code = 12 // the database file was replaced under the handle
	ErrTimeout     Code = 13 // a wait ended at its deadline
	ErrReadOnly    Code = 14 // a write on a read-only handle or file
	ErrInterrupted Code = 15 // a wait was poked (its context was cancelled)
	ErrIO          Code = 16 // an I/O error of the file system
	ErrFull        Code = 17 // the disk or the database is full
	ErrCantOpen    Code = 18 // the database file cannot be opened or created
	ErrPerm        Code = 19 // access denied
)

// ErrSQLiteCopy: the process runs (or a database/sql driver runs) on a second copy of
// SQLite, which can corrupt a database file both open (design §2).
var ErrSQLiteCopy = errors.New("tocsin: a second copy of SQLite is in this process")

var codeNames = map[Code]string{
	ErrFailed: "error", ErrInvalid: "invalid argument", ErrNotFound: "not found",
	ErrBusy: "busy", ErrLeaseLost: "lease lost", ErrClosed: "closed", ErrCorrupt: "corrupt",
	ErrTooBig: "too big", ErrVersion: "version", ErrCallback: "callback raised",
	ErrNoMem: "out of memory", ErrReplaced: "database file replaced", ErrTimeout: "timeout",
	ErrReadOnly: "read-only", ErrInterrupted: "interrupted", ErrIO: "I/O error",
	ErrFull: "full", ErrCantOpen: "cannot open", ErrPerm: "permission denied",
}

func (c Code) Error() string {
	if s, ok := codeNames[c]; ok {
		return "tocsin: " + s
	}
	return fmt.Sprintf("tocsin: code %d", int(c))
}

// Error is a failed tocsin call: its code, SQLite's extended code (0 if none), the
// core's message and the operation.
type Error struct {
	Code       Code
	SQLiteCode int
	Message    string
	Op         string
	cause      error // the context's error for waits ended by their context
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = e.Code.Error()[len("tocsin: "):]
	}
	if e.Op != "" && !strings.HasPrefix(msg, e.Op+": ") { // (the core's message may name it)
		return "tocsin: " + e.Op + ": " + msg
	}
	return "tocsin: " + msg
}

// Is matches the Code sentinels (errors.Is(err, tocsin.ErrLeaseLost)).
func (e *Error) Is(target error) bool {
	c, ok := target.(Code)
	return ok && c == e.Code
}

// Unwrap gives context.Canceled / context.DeadlineExceeded for waits their context
// ended (not for a Listener or Subscription its Close ended: that is ErrClosed), and the database/sql driver's error for the helpers of sqltx.go (EnqueueTx, ...).
func (e *Error) Unwrap() error { return e.cause }

func newErr(code Code, op, msg string) error { return &Error{Code: code, Op: op, Message: msg} }

// nilCtx refuses a nil context (ErrInvalid), as the calls that take one would
// otherwise panic on it.
func nilCtx(op string, ctx context.Context) error {
	if ctx == nil {
		return newErr(ErrInvalid, op, "ctx must not be nil (use context.Background())")
	}
	return nil
}

// ctxErr is the error of a wait its context ended: both tocsin.ErrInterrupted (or
// ErrTimeout for a deadline) and the context's own error match it.
func ctxErr(ctx context.Context, op string) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	if e, ok := context.Cause(ctx).(*closedByUser); ok { // the binding's own context, ended by a Close
		return &Error{Code: ErrClosed, Op: op, Message: e.what + " was closed", cause: e}
	}
	code := ErrInterrupted
	if errors.Is(err, context.DeadlineExceeded) {
		code = ErrTimeout
	}
	return &Error{Code: code, Op: op, Message: err.Error(), cause: err}
}

// closedByUser is the cause with which a Close ends the context of a Listener or a
// Subscription: the wait it ends reports ErrClosed (as calls after DB.Close do), not
// the context's error.
type closedByUser struct{ what string }

func (c *closedByUser) Error() string { return c.what + " was closed" }

// endedByOwner: err is how a wait ended by its context or by the Close of its owner.
func endedByOwner(err error) bool {
	var cb *closedByUser
	return isCode(err, ErrInterrupted) || isCode(err, ErrTimeout) || errors.As(err, &cb)
}
