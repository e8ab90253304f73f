package tocsin

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
func queryTocsin(ctx context.Context, q Querier, op, expr string, args ...any) (int64, error) {
	var probe, v int64
	err := q.QueryRowContext(ctx, "SELECT tocsin_go_probe(), "+expr, args...).Scan(&probe, &v)
	if err != nil {
		msg := err.Error()
		if strings.Contains(msg, "no such function: tocsin_go_probe") {
			return 0, fmt.Errorf("%w: the database/sql connection does not run on the SQLite tocsin links "+
				"(mattn/go-sqlite3 needs -tags libsqlite3, and the connection must be opened after "+
				"this package was imported)", ErrSQLiteCopy)
		}
		// the driver's error stays reachable (errors.As gives its SQLite code; a context
		// that ended or sql.ErrTxDone match errors.Is)
		code := ErrFailed
		if errors.Is(err, context.Canceled) {
			code = ErrInterrupted
		} else if errors.Is(err, context.DeadlineExceeded) {
			code = ErrTimeout
		}
		return 0, &Error{Code: code, Op: op, Message: msg, cause: err}
	}
	if probe != probeValue() {
		return 0, fmt.Errorf("%w: the database/sql connection runs on another copy of SQLite", ErrSQLiteCopy)
	}
	return v, nil
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
		m["unique_key"] = o.UniqueKey
	}
	if o.Meta != nil {
		meta, err := marshal(o.Meta)
		if err != nil {
			return nil, err
		}
		m["meta"] = json.RawMessage(meta)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// EnqueueTx enqueues a job inside the application's own database/sql transaction
// (tocsin_enqueue): a rollback drops it with the business rows.
func EnqueueTx(ctx context.Context, tx Querier, queue string, v any, opts *EnqueueOptions) (int64, error) {
	payload, err := marshal(v)
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
	payload, err := marshal(v)
	if err != nil {
		return 0, err
	}
	var key, meta any
	if opts != nil {
		if opts.Key != "" {
			key = opts.Key
		}
		m, err := marshalOpt(opts.Meta)
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
	payload, err := marshal(v)
	if err != nil {
		return 0, err
	}
	m, err := marshalOpt(meta)
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
		s, err := marshal(args)
		if err != nil {
			return 0, err
		}
		a = s
	}
	if kwargs != nil {
		s, err := marshal(kwargs)
		if err != nil {
			return 0, err
		}
		k = s
	}
	extra := map[string]any{}
	var job *EnqueueOptions
	if opts != nil {
		if opts.ResultTTL < 0 || opts.Timeout < 0 {
			return 0, newErr(ErrInvalid, "task_enqueue", "ResultTTL and Timeout must be >= 0")
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
