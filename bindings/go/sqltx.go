package tocsin

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"
)

// Querier is what the database/sql helpers run on: a *sql.Tx (the usual case: the job
// commits with the business rows), a *sql.Conn or a *sql.DB.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// The helpers call the tocsin SQL functions (docs/sql.md) on the application's own
// connection. Importing this package registers them, through sqlite3_auto_extension, on
// every connection the process's SQLite opens afterwards -- the same copy of SQLite only:
// with mattn/go-sqlite3 that means building with -tags libsqlite3. Each call also
// selects tocsin_go_probe(), which answers only on a connection of tocsin's own SQLite,
// so a driver on a second copy fails with ErrSQLiteCopy instead of writing.
//
// A refused call is an *Error whose Code follows the SQLite result code of the driver's
// error (docs/sql.md, "Errors"): SQLITE_MISMATCH and SQLITE_RANGE give ErrInvalid,
// SQLITE_TOOBIG ErrTooBig, SQLITE_BUSY ErrBusy, SQLITE_READONLY ErrReadOnly,
// SQLITE_CORRUPT ErrCorrupt, SQLITE_NOMEM ErrNoMem, SQLITE_FULL ErrFull, SQLITE_IOERR
// ErrIO, SQLITE_PERM ErrPerm, SQLITE_CANTOPEN ErrCantOpen, SQLITE_INTERRUPT
// ErrInterrupted. SQLITE_ERROR is both the other invalid arguments (a bad name, invalid
// JSON, an unknown option, text with a NUL or not UTF-8) and SQLite's failures: an
// invalid argument gives ErrInvalid, as through the native calls (see sqlArgumentError),
// anything else ErrFailed, as does any other code; a context that ended gives
// ErrInterrupted or ErrTimeout. SQLiteCode holds the code (0 if
// the driver's error carries none); the driver's error stays reachable with errors.As,
// and the context's error and sql.ErrTxDone match errors.Is.
func queryTocsin(ctx context.Context, q Querier, op, expr string, args ...any) (int64, error) {
	if err := nilCtx(op, ctx); err != nil {
		return 0, err
	}
	if nilQuerier(q) {
		return 0, newErr(ErrInvalid, op, "tx must not be nil (a *sql.Tx, *sql.Conn or *sql.DB)")
	}
	var probe, v int64
	err := q.QueryRowContext(ctx, "SELECT tocsin_go_probe(), "+expr, args...).Scan(&probe, &v)
	if err != nil {
		msg := err.Error()
		if strings.Contains(msg, "no such function: tocsin_go_probe") {
			return 0, fmt.Errorf("%w: the database/sql connection does not run on the SQLite tocsin links "+
				"(mattn/go-sqlite3 needs -tags libsqlite3, and the connection must be opened after "+
				"this package was imported)", ErrSQLiteCopy)
		}
		sc := driverCode(err)
		code := sqlCodes[sc&0xff]
		if errors.Is(err, context.Canceled) {
			code = ErrInterrupted
		} else if errors.Is(err, context.DeadlineExceeded) {
			code = ErrTimeout
		} else if code == 0 {
			code = ErrFailed
			if sc&0xff == 1 && sqlArgumentError(expr, args) {
				code = ErrInvalid // SQLITE_ERROR for a bad argument (sqlArgumentError)
			}
		}
		return 0, &Error{Code: code, SQLiteCode: sc, Op: op, Message: msg, cause: err}
	}
	if probe != probeValue() {
		return 0, fmt.Errorf("%w: the database/sql connection runs on another copy of SQLite", ErrSQLiteCopy)
	}
	return v, nil
}

// nilQuerier: q is nil, or a nil pointer (a nil *sql.Tx) in the interface.
func nilQuerier(q Querier) bool {
	if q == nil {
		return true
	}
	v := reflect.ValueOf(q)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// sqlCodes maps the primary SQLite result codes the SQL functions fail with to tocsin
// codes; any other is ErrFailed.
var sqlCodes = map[int]Code{
	20: ErrInvalid,     // SQLITE_MISMATCH
	25: ErrInvalid,     // SQLITE_RANGE
	18: ErrTooBig,      // SQLITE_TOOBIG
	5:  ErrBusy,        // SQLITE_BUSY
	8:  ErrReadOnly,    // SQLITE_READONLY
	11: ErrCorrupt,     // SQLITE_CORRUPT
	7:  ErrNoMem,       // SQLITE_NOMEM
	13: ErrFull,        // SQLITE_FULL
	10: ErrIO,          // SQLITE_IOERR
	3:  ErrPerm,        // SQLITE_PERM
	14: ErrCantOpen,    // SQLITE_CANTOPEN
	9:  ErrInterrupted, // SQLITE_INTERRUPT
}

// driverCode is the SQLite result code of a database/sql driver's error, found without
// importing a driver: the first error of the Unwrap chain with a Code() int method
// (modernc.org/sqlite) or an integer field ExtendedCode or Code (mattn/go-sqlite3's
// sqlite3.Error); 0 if none has one.
func driverCode(err error) int {
	for err != nil {
		if c, ok := err.(interface{ Code() int }); ok {
			return c.Code()
		}
		v := reflect.ValueOf(err)
		if v.Kind() == reflect.Pointer && !v.IsNil() {
			v = v.Elem()
		}
		if v.Kind() == reflect.Struct {
			for _, name := range [...]string{"ExtendedCode", "Code"} {
				if f := v.FieldByName(name); f.IsValid() && f.CanInt() && f.Int() != 0 {
					return int(f.Int())
				}
			}
		}
		err = errors.Unwrap(err)
	}
	return 0
}

// sqlOptions is EnqueueOptions as the JSON options object of tocsin_enqueue.
func (o *EnqueueOptions) sqlOptions() (any, error) {
	return o.sqlOptionsWith(nil)
}

func (o *EnqueueOptions) sqlOptionsWith(m map[string]any) (any, error) {
	if o == nil && len(m) == 0 {
		return nil, nil
	}
	if m == nil {
		m = map[string]any{}
	}
	if o == nil {
		o = &EnqueueOptions{}
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.Priority != 0 {
		m["priority"] = o.Priority
	}
	if o.Delay != 0 {
		m["delay_ms"] = ms(o.Delay)
	}
	if !o.RunAt.IsZero() {
		m["run_at_ms"] = o.RunAt.UnixMilli()
	}
	if o.MaxAttempts != 0 {
		m["max_attempts"] = o.MaxAttempts
	}
	if o.Expires != 0 {
		m["expires_ms"] = ms(o.Expires)
	}
	if o.UniqueKey != "" {
		// encoding/json would turn invalid UTF-8 into U+FFFD (two distinct keys would then
		// dedup as one) and a NUL into \u0000: refused as the native Enqueue refuses them
		if !utf8.ValidString(o.UniqueKey) || strings.IndexByte(o.UniqueKey, 0) >= 0 {
			return nil, newErr(ErrInvalid, "enqueue", "unique_key must be valid UTF-8 without NUL bytes")
		}
		m["unique_key"] = o.UniqueKey
	}
	if o.Meta != nil {
		meta, err := marshal(o.Meta, "EnqueueOptions.Meta")
		if err != nil {
			return nil, err
		}
		m["meta"] = json.RawMessage(meta)
	}
	b, err := jsonText(m)
	if err != nil {
		return nil, encodeErr("EnqueueOptions", err)
	}
	return string(b), nil
}

// EnqueueTx enqueues a job inside the application's own database/sql transaction
// (tocsin_enqueue): a rollback drops it with the business rows.
func EnqueueTx(ctx context.Context, tx Querier, queue string, v any, opts *EnqueueOptions) (int64, error) {
	payload, err := marshal(v, "EnqueueTx payload")
	if err != nil {
		return 0, err
	}
	o, err := opts.sqlOptions()
	if err != nil {
		return 0, err
	}
	return queryTocsin(ctx, tx, "enqueue", "tocsin_enqueue(?, ?, ?)", queue, payload, o)
}

// PublishTx appends a stream event inside the application's transaction.
func PublishTx(ctx context.Context, tx Querier, topic string, v any, opts *PublishOptions) (int64, error) {
	payload, err := marshal(v, "PublishTx payload")
	if err != nil {
		return 0, err
	}
	var key, meta any
	if opts != nil {
		if opts.Key != "" {
			key = opts.Key
		}
		m, err := marshalOpt(opts.Meta, "PublishOptions.Meta")
		if err != nil {
			return 0, err
		}
		if m != "" {
			meta = m
		}
	}
	return queryTocsin(ctx, tx, "publish", "tocsin_stream_publish(?, ?, ?, ?)", topic, payload, key, meta)
}

// NotifyTx records a notification inside the application's transaction.
func NotifyTx(ctx context.Context, tx Querier, channel string, v any, meta any) (int64, error) {
	payload, err := marshal(v, "NotifyTx payload")
	if err != nil {
		return 0, err
	}
	m, err := marshalOpt(meta, "NotifyTx meta")
	if err != nil {
		return 0, err
	}
	var mv any
	if m != "" {
		mv = m
	}
	return queryTocsin(ctx, tx, "notify", "tocsin_notify(?, ?, ?)", channel, payload, mv)
}

// CallTx enqueues a call of task `task` (registered by a worker of any runtime) inside
// the application's transaction (SQL tocsin_task_enqueue: the core's envelope) and
// returns the job's id; DB.WaitResult reads the outcome once it committed.
func CallTx(ctx context.Context, tx Querier, queue, task string, args []any, kwargs map[string]any, opts *CallOptions) (int64, error) {
	var a, k any
	if args != nil {
		s, err := marshal(args, "CallTx args")
		if err != nil {
			return 0, err
		}
		a = s
	}
	if kwargs != nil {
		s, err := marshal(kwargs, "CallTx kwargs")
		if err != nil {
			return 0, err
		}
		k = s
	}
	extra := map[string]any{}
	var job *EnqueueOptions
	if opts != nil {
		if err := opts.check(); err != nil {
			return 0, err
		}
		if opts.ResultTTL > 0 {
			extra["result_ttl_ms"] = ms(opts.ResultTTL)
		}
		if opts.Timeout > 0 {
			extra["timeout_ms"] = ms(opts.Timeout)
		}
		job = opts.Job
	}
	o, err := job.sqlOptionsWith(extra)
	if err != nil {
		return 0, err
	}
	return queryTocsin(ctx, tx, "task_enqueue", "tocsin_task_enqueue(?, ?, ?, ?, ?)", queue, task, a, k, o)
}
