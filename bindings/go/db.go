package tocsin

/*
#include <stdlib.h>
#include "tocsin.h"

// A settable clock for tests and demos (DB.SetTime): the handle reads the instant
// stored at ctx, which Go sets atomically from any goroutine.
static int64_t go_fixed_clock(void *ctx) { return __atomic_load_n((int64_t *)ctx, __ATOMIC_SEQ_CST); }
static void go_store_ms(int64_t *p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
static void go_use_fixed_clock(tocsin_db *db, int64_t *at) { tocsin_set_clock(db, go_fixed_clock, at); }
*/
import "C"

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Options of Open. The zero value is the default.
type Options struct {
	BusyTimeout     time.Duration // how long a writer waits for the lock; 0: 5s
	MaxPayloadBytes int64         // payload size limit; 0: 1 MiB
	ReadOnly        bool          // no bootstrap; writes fail with ErrReadOnly
	// AllowStaticSQLite lets Open proceed when the SQLite tocsin calls is not a shared
	// libsqlite3 but a copy compiled into the executable (mattn/go-sqlite3 without
	// -tags libsqlite3), or when another loaded shared object carries a second copy of
	// SQLite. Only for programs that know no other copy opens tocsin's file.
	AllowStaticSQLite bool
}

// DB is an open tocsin database: safe for use by any number of goroutines (the core
// serialises calls on one handle). Close it when done.
type DB struct {
	conn
	path   string
	file   string // the file's identity (fileKey): what the open transactions are kept by
	opts   Options
	mu     sync.RWMutex // held shared by every call on the handle, exclusively by Close
	closed atomic.Bool
	done   chan struct{} // closed when Close has finished (a concurrent Close waits for it)
	wmu    sync.Mutex
	wcond  *sync.Cond // signalled when a waiter leaves waits
	waits  map[*waiter]struct{}

	regOnce sync.Once
	reg     *registry // the tasks declared with Task

	clockMu sync.Mutex
	clock   *C.int64_t // non-nil after SetTime: the instant the handle's clock reads (C memory)
}

// conn is what a DB and a Tx share: the tocsin_db handle the calls run on.
type conn struct {
	p  *C.tocsin_db
	db *DB
	tx *Tx // non-nil for a transaction's handle
}

// Open opens (creating if needed) the database at path: WAL, synchronous=NORMAL,
// busy timeout and foreign keys set by the core, schema bootstrapped. opts may be nil.
func Open(path string, opts *Options) (*DB, error) {
	if opts == nil {
		opts = &Options{}
	}
	if err := checkSQLiteCopy(opts); err != nil {
		return nil, err
	}
	if strings.IndexByte(path, 0) >= 0 {
		return nil, newErr(ErrInvalid, "open", "path contains a NUL byte")
	}
	var o C.tocsin_open_opts
	o.version = C.TOCSIN_OPEN_OPTS_VERSION
	if err := nonNeg("open", "Options.BusyTimeout", opts.BusyTimeout); err != nil {
		return nil, err
	}
	if opts.MaxPayloadBytes < 0 {
		return nil, newErr(ErrInvalid, "open", fmt.Sprintf("Options.MaxPayloadBytes must be >= 0 (0: 1 MiB), not %d", opts.MaxPayloadBytes))
	}
	bt := ms(opts.BusyTimeout) // a positive timeout under 1ms stays positive (0 is the 5s default)
	if bt > math.MaxInt32 {
		// the core's busy_timeout_ms is a C int: refused, not cut to another timeout
		return nil, newErr(ErrInvalid, "open", fmt.Sprintf("Options.BusyTimeout must be at most %v (2^31-1 ms), not %v",
			time.Duration(math.MaxInt32)*time.Millisecond, opts.BusyTimeout))
	}
	o.busy_timeout_ms = C.int(bt)
	o.max_payload_bytes = C.int64_t(opts.MaxPayloadBytes)
	if opts.ReadOnly {
		o.read_only = 1
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var p *C.tocsin_db
	runtime.LockOSThread()
	rc := C.tocsin_open(&p, cpath, &o)
	var err error
	if rc != 0 {
		err = lastError(rc, "open")
		C.tocsin_close(p)
	}
	runtime.UnlockOSThread()
	if err != nil {
		return nil, err
	}
	db := &DB{path: path, opts: *opts, waits: map[*waiter]struct{}{}, done: make(chan struct{})}
	db.file = fileKey(path, db)
	db.wcond = sync.NewCond(&db.wmu)
	db.conn = conn{p: p, db: db}
	runtime.SetFinalizer(db, func(db *DB) { _ = db.Close() })
	return db, nil
}

// checkSQLiteCopy refuses a process where tocsin's SQLite is compiled into the
// executable rather than the shared libsqlite3, or where another loaded shared object
// carries a second copy of SQLite (the core looks; see docs/architecture.md, "Go").
func checkSQLiteCopy(opts *Options) error {
	if opts.AllowStaticSQLite {
		return nil
	}
	if lib := SQLite().Library; lib != "" && !strings.Contains(lib, "libsqlite3") {
		return fmt.Errorf("%w: tocsin's SQLite %s comes from %s, not the shared libsqlite3 "+
			"(a driver compiled its own SQLite into the program, e.g. mattn/go-sqlite3 built "+
			"without -tags libsqlite3; build with -tags libsqlite3, or set "+
			"Options.AllowStaticSQLite if every SQLite user is bound to that copy)",
			ErrSQLiteCopy, SQLite().Version, lib)
	}
	var msg [1024]C.char
	if C.tocsin_check_sqlite_copies(&msg[0], C.size_t(len(msg))) != 0 {
		return sqliteCopyError("tocsin: " + C.GoString(&msg[0]) +
			" (set Options.AllowStaticSQLite if that copy never opens this file)")
	}
	return nil
}

// sqliteCopyError is the core's own message, matching ErrSQLiteCopy with errors.Is.
type sqliteCopyError string

func (e sqliteCopyError) Error() string { return string(e) }
func (e sqliteCopyError) Unwrap() error { return ErrSQLiteCopy }

// SetTime fixes the handle's clock at t (the core's injectable clock: leases, delays,
// deadlines and schedules follow it), for tests and demos; later calls move it. A zero t
// restores the system clock. Transactions and workers opened afterwards follow it too.
// Like the C API, set it before other goroutines rely on the handle's time. A t before
// the Unix epoch or after the year 9999 is ErrInvalid, as in the other bindings.
func (db *DB) SetTime(t time.Time) error {
	if !t.IsZero() {
		if m := t.UnixMilli(); m < 0 || m > maxTimeMs {
			return newErr(ErrInvalid, "set_clock", "t must be between the Unix epoch and 9999-12-31T23:59:59.999Z, not "+t.String())
		}
	}
	db.clockMu.Lock()
	defer db.clockMu.Unlock()
	return db.do(context.Background(), "set_clock", func(p *C.tocsin_db) C.int {
		if t.IsZero() {
			C.tocsin_set_clock(p, nil, nil)
			return 0
		}
		if db.clock == nil {
			db.clock = (*C.int64_t)(C.malloc(8)) // freed with the process: the handle may outlive Close in transactions
		}
		C.go_store_ms(db.clock, C.int64_t(t.UnixMilli()))
		C.go_use_fixed_clock(p, db.clock)
		return 0
	})
}

// shareClock gives another handle on the same file db's fixed clock, if any.
func (db *DB) shareClock(other *DB) {
	db.clockMu.Lock()
	defer db.clockMu.Unlock()
	if db.clock != nil {
		C.go_use_fixed_clock(other.p, db.clock)
	}
}

// Path is the path the database was opened with.
func (db *DB) Path() string { return db.path }

// Close closes the database: waits of other goroutines on it (results, locks, queue
// waits, listeners, subscriptions, workers) end with ErrClosed first, and Close returns
// once they have let go (a Worker shuts down gracefully first). Transactions in
// progress keep the core's handle alive until they end. A call of another goroutine
// waiting for the database's write lock ends with ErrClosed at once, not at the end of
// its busy timeout. Calling Close again is a no-op that returns once the first Close
// has finished.
func (db *DB) Close() error {
	if db.closed.Swap(true) {
		<-db.done
		return nil
	}
	defer close(db.done)
	runtime.SetFinalizer(db, nil)
	db.wmu.Lock()
	ws := make([]*waiter, 0, len(db.waits))
	for w := range db.waits {
		ws = append(ws, w)
	}
	db.wmu.Unlock()
	for _, w := range ws {
		w.fire(true)
	}
	// every wait, listener, subscription and worker has let go of the handle
	db.wmu.Lock()
	for len(db.waits) > 0 {
		db.wcond.Wait()
	}
	db.wmu.Unlock()
	// calls still running hold mu shared: one waiting for a lock ends now
	C.tocsin_close_begin(db.p)
	db.mu.Lock()
	defer db.mu.Unlock()
	p := db.p
	db.p = nil
	return call("close", func() C.int { return C.tocsin_close(p) })
}

// acquire pins the handle for one call: ErrClosed after Close. Transaction handles
// live until their end, independently of Close.
func (c *conn) acquire(op string) (*C.tocsin_db, func(), error) {
	if c.tx != nil {
		// held shared for the call: the end of the transaction (which hands the core's
		// handle back to its pool, or frees it) waits for calls of other goroutines
		c.tx.mu.RLock()
		if c.tx.done.Load() {
			c.tx.mu.RUnlock()
			return nil, nil, newErr(ErrClosed, op, "the transaction has ended")
		}
		return c.p, c.tx.mu.RUnlock, nil
	}
	db := c.db
	db.mu.RLock()
	if db.closed.Load() {
		db.mu.RUnlock()
		return nil, nil, newErr(ErrClosed, op, "the database is closed")
	}
	return db.p, db.mu.RUnlock, nil
}

// do runs f on the handle with the thread's error read in the same locked thread.
func (c *conn) do(ctx context.Context, op string, f func(p *C.tocsin_db) C.int) error {
	if err := nilCtx(op, ctx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return ctxErr(ctx, op)
	}
	p, release, err := c.acquire(op)
	if err != nil {
		return err
	}
	dl, bounded := ctx.Deadline()
	// a call on the DB from inside the caller's own transaction on its file (db.Tx, a
	// TaskTx run): a write would wait for the lock that transaction holds, the busy
	// timeout long, and fail; it fails at once instead (reads go on)
	own := c.tx == nil && c.db.heldByCaller()
	// a cancellable ctx: its cancel ends the call's wait for another connection's
	// lock (a token the call's thread is bound to, fired from the ctx's AfterFunc)
	var tok *C.tocsin_cancel
	var stop func() bool
	var fired chan struct{}
	if ctx.Done() != nil && !own {
		if tok = C.tocsin_cancel_new(); tok != nil {
			fired = make(chan struct{})
			stop = context.AfterFunc(ctx, func() { C.tocsin_cancel_fire(tok); close(fired) })
		}
	}
	err = call(op, func() C.int {
		if !bounded && !own && tok == nil {
			return f(p)
		}
		// the ctx's deadline bounds the call's waits for another connection's lock
		// (the thread is locked for the call: tocsin_thread_timeout is per thread)
		ms := int64(-1)
		if own {
			ms = 0
		} else if bounded {
			ms = int64((time.Until(dl) + time.Millisecond - 1) / time.Millisecond) // not before the deadline
			ms = max(ms, 0)
		}
		C.tocsin_thread_timeout(C.int(min(ms, math.MaxInt32)))
		C.tocsin_thread_cancel(tok)
		// unbound even if f panics: the thread must not keep a token that is freed below
		defer func() {
			C.tocsin_thread_cancel(nil)
			C.tocsin_thread_timeout(-1)
		}()
		return f(p)
	})
	if tok != nil {
		if !stop() {
			<-fired // the fire ran or runs: the token is freed after it
		}
		C.tocsin_cancel_free(tok)
	}
	release()
	if own && isCode(err, ErrBusy) {
		return ownTxErr(op)
	}
	if bounded && isCode(err, ErrBusy) && !time.Now().Before(dl) {
		// (ctx.Err() may lag: its timer fires on its own)
		return errors.Join(&Error{Code: ErrTimeout, Op: op, Message: context.DeadlineExceeded.Error(),
			cause: context.DeadlineExceeded}, err)
	}
	if tok != nil && isCode(err, ErrInterrupted) {
		// the ctx ended while the call waited for the lock (its AfterFunc fired the
		// token): the ctx's error first (ErrTimeout for its deadline), nothing written
		if cerr := ctxErr(ctx, op); cerr != nil {
			return errors.Join(cerr, err)
		}
	}
	if isCode(err, ErrBusy) {
		// the wait ran out as the ctx ended (or a ctx whose Done is nil says it ended):
		// the error says so, as a wait the context ended does (ErrInterrupted or
		// ErrTimeout, and the ctx's error, match it, besides ErrBusy)
		if cerr := ctxErr(ctx, op); cerr != nil {
			return errors.Join(cerr, err)
		}
	}
	return err
}

// doCS is do for a call with string arguments: refused before it runs when one of them
// cannot be passed to C (a NUL byte).
func (c *conn) doCS(ctx context.Context, cs *cstrings, op string, f func(p *C.tocsin_db) C.int) error {
	if err := cs.check(op); err != nil {
		return err
	}
	return c.do(ctx, op, f)
}

// Now is the handle's clock; the zero Time once the DB (or the transaction) was closed,
// the one failure it can have.
func (c *conn) Now() time.Time {
	var ms C.int64_t
	_ = c.do(context.Background(), "now", func(p *C.tocsin_db) C.int { ms = C.tocsin_now(p); return 0 })
	return fromMs(int64(ms))
}

// Exec runs SQL text of the application's (no result rows, no parameters) on the
// handle's connection, statement by statement up to the first failure: inside Tx, it
// joins the transaction. Transactions are db.Tx's: SQL that begins or ends one (BEGIN,
// COMMIT, ROLLBACK, END, a SAVEPOINT outside a transaction) is refused by the core
// before it runs, with ErrInvalid.
func (c *conn) Exec(ctx context.Context, sql string) error {
	var cs cstrings
	defer cs.free()
	s := cs.str(sql)
	return c.doCS(ctx, &cs, "exec", func(p *C.tocsin_db) C.int { return C.tocsin_exec(p, s) })
}

// Tx is a write transaction on a connection of its own (tocsin_tx_begin): every call
// made on it joins the transaction; calls on the DB do not. Use it from one goroutine
// at a time; waits are not available inside a transaction.
type Tx struct {
	conn
	mu     sync.RWMutex // held shared by every call on the transaction, exclusively by its end
	done   atomic.Bool
	holder holderKey // the goroutine that began it, and the file
}

// ---- the transactions each goroutine holds ----

// A goroutine inside its own transaction (db.Tx's fn, a TaskTx handler) that calls the
// DB -- or any handle on the same file -- instead of the transaction would wait for the
// write lock the transaction holds, the whole busy timeout, and then fail with a
// misleading "database is locked": the holder is the caller itself. The open
// transactions are kept here by goroutine and file, so such a call is refused at once
// (ErrInvalid). Go has no goroutine-local storage: the goroutine's id is read from its
// stack header, only while some transaction of the process is open.
type holderKey struct {
	g    int64
	file string // DB.file
}

var (
	holdersN  atomic.Int64 // open transactions (goid is read only when > 0)
	holdersMu sync.Mutex
	holders   = map[holderKey]int{}
)

func holdTx(k holderKey) {
	holdersMu.Lock()
	holders[k]++
	holdersMu.Unlock()
	holdersN.Add(1)
}

func releaseTx(k holderKey) {
	holdersMu.Lock()
	if holders[k]--; holders[k] <= 0 {
		delete(holders, k)
	}
	holdersMu.Unlock()
	holdersN.Add(-1)
}

// heldByCaller: the calling goroutine holds a transaction on db's file.
func (db *DB) heldByCaller() bool {
	if holdersN.Load() == 0 {
		return false
	}
	k := holderKey{goid(), db.file}
	holdersMu.Lock()
	n := holders[k]
	holdersMu.Unlock()
	return n > 0
}

// fileKey is the identity of the database file at path, by which the open transactions
// are kept: its device and inode where the platform has them, so that handles opened
// through paths spelled differently ("dir//app.db", a relative path, a symlink, a hard
// link) are known to share the file and its write lock; else its absolute path with
// symlinks resolved. A path that names no file (an in-memory database) is db's alone.
func fileKey(path string, db *DB) string {
	if id, ok := fileID(path); ok {
		return id
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Sprintf("handle %p", db)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "path " + path
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	return "path " + abs
}

// goid is the calling goroutine's id, from the header of its stack trace
// ("goroutine 18 [running]:").
func goid() int64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	var id int64
	for _, c := range b {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + int64(c-'0')
	}
	return id
}

// ownTxErr is the error of a call that needed the write lock the caller's own
// transaction holds.
func ownTxErr(op string) error {
	return &Error{Code: ErrInvalid, Op: op, Message: "called on the database inside this goroutine's own " +
		"transaction on the same file (db.Tx's fn, or a TaskTx handler), whose write lock it would wait for " +
		"until the busy timeout: make the call on the transaction (tx.Queue(...), tx.Notify(...), ...)"}
}

// Tx runs fn in a write transaction (BEGIN IMMEDIATE, waiting up to the busy timeout):
// it commits when fn returns nil and rolls back when fn returns an error or panics,
// so the jobs, events and notifications written through tx commit or vanish together
// with the application's own writes (tx.Exec). As with database/sql's BeginTx, a ctx
// that ended before the commit rolls it back: Tx returns the context's error.
func (db *DB) Tx(ctx context.Context, fn func(tx *Tx) error) (err error) {
	if fn == nil {
		return newErr(ErrInvalid, "tx begin", "fn must not be nil")
	}
	tx, err := db.begin(ctx)
	if err != nil {
		return err
	}
	// fn panicked or called runtime.Goexit (t.FailNow): roll back, never leave the
	// write lock held; a panic goes on unchanged
	defer tx.end(false) // a no-op once the transaction ended
	if ferr := fn(tx); ferr != nil {
		if rerr := tx.end(false); rerr != nil {
			return errors.Join(ferr, rerr)
		}
		return ferr
	}
	if cerr := ctxErr(ctx, "commit"); cerr != nil {
		if rerr := tx.end(false); rerr != nil {
			return errors.Join(cerr, rerr)
		}
		return cerr
	}
	return tx.end(true)
}

// begin starts a transaction held by the calling goroutine (the one that runs fn, or
// the TaskTx handler) until end.
func (db *DB) begin(ctx context.Context) (*Tx, error) {
	if db.heldByCaller() {
		return nil, newErr(ErrInvalid, "tx begin", "db.Tx inside a transaction of this goroutine on the same "+
			"database file (db.Tx's fn, or a TaskTx handler): the inner one would wait for the write lock the "+
			"outer one holds; make the calls on the outer tx instead")
	}
	var tp *C.tocsin_db
	if err := db.do(ctx, "tx begin", func(p *C.tocsin_db) C.int { return C.tocsin_tx_begin(p, &tp) }); err != nil {
		return nil, err
	}
	tx := &Tx{holder: holderKey{goid(), db.file}}
	tx.conn = conn{p: tp, db: db, tx: tx}
	holdTx(tx.holder)
	return tx, nil
}

func (tx *Tx) end(commit bool) error {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.done.Swap(true) {
		return nil
	}
	releaseTx(tx.holder)
	p := tx.p
	if commit {
		return call("commit", func() C.int { return C.tocsin_tx_commit(p) })
	}
	return call("rollback", func() C.int { return C.tocsin_tx_rollback(p) })
}

// ---- time ----

// ms is d in whole milliseconds, rounded away from zero: a positive duration under a
// millisecond stays positive (not 0, which the core reads as "none" or "the default").
func ms(d time.Duration) int64 {
	m := d.Milliseconds()
	if rem := d - time.Duration(m)*time.Millisecond; rem > 0 {
		m++
	} else if rem < 0 {
		m--
	}
	return m
}

// count passes a count option to C (a C int) once it is within the core's bounds,
// 0 (the default, named by dflt) or 1..hi: refused otherwise with an error that names
// the Go option and the value as given (a value beyond a C int is never cut to one
// first, so the message cannot name another number). hi is the core's constant.
func count(op, what string, v, hi int, dflt string) (C.int, error) {
	if v < 0 || v > hi {
		return 0, newErr(ErrInvalid, op, fmt.Sprintf("%s must be between 1 and %d (0: %s), not %d", what, hi, dflt, v))
	}
	return C.int(v), nil
}

// The core's bounds, checked here so that an error names the Go option or argument
// (EnqueueOptions.RunAt, Lock.TTL) in Go's units: the core's messages name its C
// argument (run_at_ms, ttl_ms) in milliseconds. A time.Duration (at most ~292 years)
// never exceeds maxTimeMs; instants and the 366-day leases can.
const (
	maxTimeMs  = C.TOCSIN_MAX_TIME_MS  // 9999-12-31T23:59:59.999Z
	maxLeaseMs = C.TOCSIN_MAX_LEASE_MS // a lock's TTL, a rate limit's Per, the scheduler's lease (366 days)
	maxLease   = time.Duration(maxLeaseMs) * time.Millisecond
	// a worker's Visibility and SchedulerTTL: 0 (their defaults) or at least this
	minWorkerLease = time.Duration(C.TOCSIN_MIN_WORKER_LEASE_MS) * time.Millisecond
)

// nonNeg refuses a negative duration, naming it.
func nonNeg(op, what string, d time.Duration) error {
	if d < 0 {
		return newErr(ErrInvalid, op, what+" must be >= 0, not "+d.String())
	}
	return nil
}

// durIn refuses a duration outside [lo, hi], naming it; note says what hi is.
func durIn(op, what string, d, lo, hi time.Duration, note string) error {
	if d < lo || d > hi {
		return newErr(ErrInvalid, op, fmt.Sprintf("%s must be between %v and %v%s, not %v", what, lo, hi, note, d))
	}
	return nil
}

// lease checks a lock's TTL or a rate limit's Per: over 0, at most 366 days.
func lease(op, what string, d time.Duration) error {
	if d <= 0 || d > maxLease {
		return newErr(ErrInvalid, op, what+" must be > 0 and at most "+maxLease.String()+" (366 days), not "+d.String())
	}
	return nil
}

// instant refuses a time the core cannot store (before the Unix epoch, after the year
// 9999), naming it; the zero Time is "none".
func instant(op, what string, t time.Time) error {
	if t.IsZero() {
		return nil
	}
	if m := t.UnixMilli(); m <= 0 || m > maxTimeMs {
		return newErr(ErrInvalid, op, what+" must be after the Unix epoch and at most 9999-12-31T23:59:59.999Z, not "+
			t.String())
	}
	return nil
}

func toMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMs(v int64) time.Time {
	if v <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

// ---- waits ----

// waiter connects a blocked wait to its context and to Close: fire pokes the wait
// (tocsin_*_poke), never after the wait's owner called detach (the C object may be gone).
//
// The owner of the C object is the one goroutine that waits on it; it alone closes it,
// in this order: detach (no poke reaches the object afterwards), close the object, then
// leave (Close, waiting for the waiters to leave, goes on). Nothing else frees it: Close
// and the context only poke, and only before detach.
type waiter struct {
	mu       sync.Mutex
	done     bool
	dbClosed bool
	poke     func()
	stop     func() bool
	db       *DB
	closedCh chan struct{} // closed when Close fires the waiter (a goroutine blocked elsewhere sees it)
}

// newWaiter registers a wait with Close and with ctx. A wait registered while Close runs
// (after it took its list of waiters) is fired here: Close's flag is set before it takes
// the list, and read after registering.
func (db *DB) newWaiter(ctx context.Context, poke func()) *waiter {
	w := db.waiterFor(poke)
	db.watch(ctx, w)
	return w
}

// waiterFor makes a waiter that is not registered yet (for an owner that needs the
// waiter in hand before Close can fire it: the Worker).
func (db *DB) waiterFor(poke func()) *waiter {
	return &waiter{poke: poke, db: db, closedCh: make(chan struct{})}
}

// watch registers w (see newWaiter); stop is set first, so a goroutine that Close's
// fire starts may detach w at once.
func (db *DB) watch(ctx context.Context, w *waiter) {
	w.stop = context.AfterFunc(ctx, func() { w.fire(false) })
	db.wmu.Lock()
	db.waits[w] = struct{}{}
	db.wmu.Unlock()
	if db.closed.Load() {
		w.fire(true)
	}
}

func (w *waiter) fire(dbClosed bool) {
	w.mu.Lock()
	if !w.done {
		if dbClosed && !w.dbClosed {
			w.dbClosed = true
			close(w.closedCh)
		}
		w.poke()
	}
	w.mu.Unlock()
}

func (w *waiter) isDBClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dbClosed
}

// detach: no poke reaches the C object from now on (a poke in progress has returned);
// the owner may close it.
func (w *waiter) detach() {
	w.stop()
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// leave unregisters the waiter: Close stops waiting for it. The owner has closed (or let
// go of) its C object.
func (w *waiter) leave() {
	w.db.wmu.Lock()
	delete(w.db.waits, w)
	w.db.wcond.Broadcast()
	w.db.wmu.Unlock()
}

// finish is detach and leave, for an owner that closes its C object later while still
// holding the handle (blockingWait) or that registers a waiter per wait (Events).
func (w *waiter) finish() {
	w.detach()
	w.leave()
}

// timeoutMs is the real-time bound of one wait from ctx's deadline (-1: none).
func timeoutMs(ctx context.Context) C.int {
	dl, ok := ctx.Deadline()
	if !ok {
		return -1
	}
	d := time.Until(dl)
	if d <= 0 {
		return 0
	}
	m := (d + time.Millisecond - 1) / time.Millisecond
	if m > math.MaxInt32 {
		return math.MaxInt32
	}
	return C.int(m)
}

// waitErr turns how a wait ended into the error to return: the context's error when it
// ended because of it, ErrClosed when Close ended it, the core's error otherwise.
func waitErr(ctx context.Context, w *waiter, err error, op string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrInterrupted) || errors.Is(err, ErrTimeout) || errors.Is(err, ErrClosed) {
		if w != nil && w.isDBClosed() {
			return newErr(ErrClosed, op, "the database was closed")
		}
		if cerr := ctxErr(ctx, op); cerr != nil {
			return cerr
		}
		// the core's deadline (ms granularity) may pass just before the context's timer fires
		if dl, ok := ctx.Deadline(); ok && isCode(err, ErrTimeout) && time.Until(dl) < 2*time.Millisecond {
			return &Error{Code: ErrTimeout, Op: op, Message: context.DeadlineExceeded.Error(), cause: context.DeadlineExceeded}
		}
	}
	return err
}
