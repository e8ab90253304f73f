// The Go agent of the interop matrix (protocol: interop-tests/README.md). It is built
// in a module of its own that requires the tocsin module from a file-system GOPROXY,
// with an empty GOMODCACHE, and -tags libsqlite3 (mattn/go-sqlite3 on the system SQLite).
package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"time"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
	_ "github.com/mattn/go-sqlite3"
)

const rt = "go"

type agent struct {
	db       *tocsin.DB
	stopW    context.CancelFunc
	doneW    chan error
	sub      *tocsin.Subscription
	subTopic string
	subCons  string
	subLast  int64
	stopSub  context.CancelFunc
	listener *tocsin.Listener
	stopL    context.CancelFunc
	locks    map[string]*tocsin.Lock
}

type reply map[string]any

var ctx = context.Background()

func decode(text string) (any, error) {
	d := json.NewDecoder(strings.NewReader(text))
	d.UseNumber() // large integers stay exact
	var v any
	err := d.Decode(&v)
	return v, err
}

func (a *agent) close() {
	a.workerStop()
	if a.sub != nil {
		a.stopSub()
		_ = a.sub.Close()
		a.sub = nil
	}
	if a.listener != nil {
		a.stopL()
		_ = a.listener.Close()
		a.listener = nil
	}
	a.locks = map[string]*tocsin.Lock{}
	if a.db != nil {
		_ = a.db.Close()
		a.db = nil
	}
}

func (a *agent) workerStop() {
	if a.stopW != nil {
		a.stopW()
		<-a.doneW
		a.stopW = nil
	}
}

func (a *agent) lock(name, owner, ttl string) (*tocsin.Lock, error) {
	k := name + "\x00" + owner
	if l, ok := a.locks[k]; ok {
		return l, nil
	}
	ms, err := strconv.Atoi(ttl)
	if err != nil {
		return nil, err
	}
	l := a.db.Lock(name, owner, time.Duration(ms)*time.Millisecond)
	a.locks[k] = l
	return l, nil
}

func sqlConn(path string) (*sql.DB, error) {
	c, err := sql.Open("sqlite3", path+"?_busy_timeout=10000")
	if err != nil {
		return nil, err
	}
	c.SetMaxOpenConns(1)
	_, err = c.Exec("CREATE TABLE IF NOT EXISTS orders(id INTEGER PRIMARY KEY, who TEXT)")
	return c, err
}

func (a *agent) do(op string, args []string) (reply, error) {
	switch op {
	case "hello":
		file, _ := runtime.FuncForPC(reflect.ValueOf(tocsin.Open).Pointer()).FileLine(reflect.ValueOf(tocsin.Open).Pointer())
		return reply{"runtime": rt, "version": runtime.Version(), "module": file, "tocsin": tocsin.Version(),
			"sqlite": tocsin.SQLite().Version, "bigint": true}, nil
	case "open":
		a.close()
		db, err := tocsin.Open(args[0], nil)
		a.db = db
		return reply{}, err
	case "close", "quit":
		a.close()
		return reply{}, nil
	case "enqueue":
		p, err := decode(args[1])
		if err != nil {
			return nil, err
		}
		m, err := decode(args[2])
		if err != nil {
			return nil, err
		}
		id, err := a.db.Queue(args[0]).Enqueue(ctx, p, &tocsin.EnqueueOptions{Meta: m, MaxAttempts: 1})
		return reply{"id": id}, err
	case "claim_ack":
		q := a.db.Queue(args[0])
		for {
			j, err := q.ClaimOne(ctx, "go-consumer", 30*time.Second)
			if errors.Is(err, tocsin.ErrNotFound) {
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				err = q.Wait(wctx)
				cancel()
				if err != nil {
					return nil, err
				}
				continue
			}
			if err != nil {
				return nil, err
			}
			p, err := decode(string(j.Payload))
			if err != nil {
				return nil, err
			}
			m, _ := decode(string(j.Meta))
			err = q.Ack(ctx, j)
			return reply{"payload": p, "meta": m, "acked": err == nil}, err
		}
	case "job":
		id, _ := strconv.ParseInt(args[0], 10, 64)
		j, err := a.db.Queue("jobs").Get(ctx, id)
		if errors.Is(err, tocsin.ErrNotFound) {
			return reply{"state": nil}, nil
		}
		if err != nil {
			return nil, err
		}
		return reply{"state": j.State}, nil
	case "worker_start":
		o := &tocsin.TaskOptions{Queue: args[0], BackoffBase: 10 * time.Millisecond}
		tocsin.Task(a.db, "echo", func(_ context.Context, x json.RawMessage) (map[string]any, error) {
			return map[string]any{"by": rt, "echo": x}, nil
		}, o)
		tocsin.Task(a.db, "boom", func(_ context.Context, x json.RawMessage) (any, error) {
			return nil, fmt.Errorf("boom: %s", x)
		}, o)
		w, err := a.db.NewWorker(tocsin.WorkerOptions{Queues: []string{args[0]}, Scheduler: true,
			ShutdownTimeout: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			return nil, err
		}
		wctx, stop := context.WithCancel(ctx)
		a.stopW, a.doneW = stop, make(chan error, 1)
		go func() { a.doneW <- w.Run(wctx) }()
		return reply{}, nil
	case "worker_stop":
		a.workerStop()
		return reply{}, nil
	case "call":
		var list []any
		v, err := decode(args[2])
		if err != nil {
			return nil, err
		}
		list, _ = v.([]any)
		h, err := a.db.Call(ctx, args[0], args[1], list, nil, &tocsin.CallOptions{Job: &tocsin.EnqueueOptions{MaxAttempts: 1}})
		if err != nil {
			return nil, err
		}
		return reply{"id": h.JobID}, nil
	case "result":
		id, _ := strconv.ParseInt(args[0], 10, 64)
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		r, err := a.db.WaitResult(wctx, id)
		if err != nil {
			return nil, err
		}
		if r.Err != nil {
			return reply{"error": map[string]any{"type": r.Err.Type, "message": r.Err.Message}}, nil
		}
		v, err := decode(string(r.Value))
		return reply{"value": v}, err
	case "publish":
		v, err := decode(args[1])
		if err != nil {
			return nil, err
		}
		off, err := a.db.Stream(args[0]).Publish(ctx, v, nil)
		return reply{"offset": off}, err
	case "sub_start":
		sctx, stop := context.WithCancel(ctx)
		s, err := a.db.Stream(args[0]).Subscribe(sctx, args[1], &tocsin.SubscribeOptions{Batch: 1})
		if err != nil {
			stop()
			return nil, err
		}
		a.sub, a.stopSub, a.subTopic, a.subCons, a.subLast = s, stop, args[0], args[1], 0
		return reply{}, nil
	case "sub_next":
		n, _ := strconv.Atoi(args[0])
		events := []any{}
		for len(events) < n {
			m, ok := <-a.sub.C
			if !ok {
				return nil, fmt.Errorf("subscription ended: %v", a.sub.Err())
			}
			v, _ := decode(string(m.Payload))
			events = append(events, map[string]any{"offset": m.ID, "payload": v})
			a.subLast = m.ID
		}
		return reply{"events": events}, nil
	case "sub_stop":
		a.stopSub()
		_ = a.sub.Close()
		a.sub = nil
		// the offset of the last event this consumer processed
		_, err := a.db.Stream(a.subTopic).SaveOffset(ctx, a.subCons, a.subLast)
		return reply{}, err
	case "offset":
		off, err := a.db.Stream(args[0]).Offset(ctx, args[1])
		return reply{"offset": off}, err
	case "listen_start":
		lctx, stop := context.WithCancel(ctx)
		l, err := a.db.Listen(lctx, args[0], nil)
		if err != nil {
			stop()
			return nil, err
		}
		a.listener, a.stopL = l, stop
		return reply{}, nil
	case "listen_next":
		m, ok := <-a.listener.C
		if !ok {
			return nil, fmt.Errorf("listener ended: %v", a.listener.Err())
		}
		v, err := decode(string(m.Payload))
		return reply{"payload": v}, err
	case "listen_stop":
		a.stopL()
		_ = a.listener.Close()
		a.listener = nil
		return reply{}, nil
	case "notify":
		v, err := decode(args[1])
		if err != nil {
			return nil, err
		}
		id, err := a.db.Notify(ctx, args[0], v, nil)
		return reply{"id": id}, err
	case "lock_try":
		l, err := a.lock(args[0], args[1], args[2])
		if err != nil {
			return nil, err
		}
		ok, err := l.TryAcquire(ctx)
		if !ok {
			return reply{"token": 0}, err
		}
		return reply{"token": l.Token()}, err
	case "lock_wait":
		l, err := a.lock(args[0], args[1], args[2])
		if err != nil {
			return nil, err
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		err = l.Acquire(wctx)
		return reply{"token": l.Token()}, err
	case "lock_renew", "lock_release":
		l := a.locks[args[0]+"\x00"+args[1]]
		var err error
		if op == "lock_renew" {
			err = l.Renew(ctx)
		} else {
			err = l.Release(ctx)
		}
		if errors.Is(err, tocsin.ErrLeaseLost) {
			return reply{"res": false}, nil
		}
		return reply{"res": err == nil}, err
	case "schedule":
		v, err := decode(args[3])
		if err != nil {
			return nil, err
		}
		t, err := a.db.SetSchedule(ctx, args[0], args[1], args[2], v, nil)
		return reply{"next_fire": t.UnixMilli()}, err
	case "unschedule":
		return reply{"res": true}, a.db.RemoveSchedule(ctx, args[0])
	case "sql_call": // database/sql + mattn/go-sqlite3: the app's own transaction
		c, err := sqlConn(args[0])
		if err != nil {
			return nil, err
		}
		defer c.Close()
		who := "database/sql " + args[4] + " " + args[1]
		tx, err := c.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders(who) VALUES (?)", who); err != nil {
			_ = tx.Rollback()
			return nil, err
		}
		v, _ := decode(args[3])
		list, _ := v.([]any)
		id, err := tocsin.CallTx(ctx, tx, args[1], args[2], list, nil, &tocsin.CallOptions{Job: &tocsin.EnqueueOptions{MaxAttempts: 1}})
		if err != nil {
			_ = tx.Rollback()
			return nil, err
		}
		if args[4] == "rollback" {
			err = tx.Rollback()
		} else {
			err = tx.Commit()
		}
		if err != nil {
			return nil, err
		}
		var rows int
		var job sql.NullString
		if err := c.QueryRowContext(ctx, "SELECT count(*) FROM orders WHERE who = ?", who).Scan(&rows); err != nil {
			return nil, err
		}
		if err := c.QueryRowContext(ctx, "SELECT tocsin_job(?)", id).Scan(&job); err != nil {
			return nil, err
		}
		var j any
		if job.Valid {
			j, _ = decode(job.String)
		}
		return reply{"id": id, "rows": rows, "job": j}, nil
	case "sql_result":
		c, err := sqlConn(args[0])
		if err != nil {
			return nil, err
		}
		defer c.Close()
		id, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil {
			return nil, err
		}
		for i := 0; i < 3000; i++ {
			var r sql.NullString
			if err := c.QueryRowContext(ctx, "SELECT tocsin_result_get(?)", id).Scan(&r); err != nil {
				return nil, err
			}
			if r.Valid {
				v, err := decode(r.String)
				return reply{"result": v}, err
			}
			time.Sleep(20 * time.Millisecond)
		}
		return nil, errors.New("no result")
	case "sql_claim_ack":
		c, err := sqlConn(args[0])
		if err != nil {
			return nil, err
		}
		defer c.Close()
		for i := 0; i < 3000; i++ {
			var text string
			if err := c.QueryRowContext(ctx, "SELECT tocsin_claim(?, 'database/sql', 1, 30000)", args[1]).Scan(&text); err != nil {
				return nil, err
			}
			var rows []struct {
				ID      int64           `json:"id"`
				Token   int64           `json:"token"`
				Payload json.RawMessage `json:"payload"`
			}
			if err := json.Unmarshal([]byte(text), &rows); err != nil {
				return nil, err
			}
			if len(rows) > 0 {
				var acked int
				if err := c.QueryRowContext(ctx, "SELECT tocsin_ack(?, ?)", rows[0].ID, rows[0].Token).Scan(&acked); err != nil {
					return nil, err
				}
				p, _ := decode(string(rows[0].Payload))
				return reply{"id": rows[0].ID, "payload": p, "acked": acked == 1}, nil
			}
			time.Sleep(20 * time.Millisecond)
		}
		return nil, errors.New("nothing to claim")
	}
	return nil, fmt.Errorf("unknown op %q", op)
}

func main() {
	a := &agent{locks: map[string]*tocsin.Lock{}}
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriter(os.Stdout)
	for {
		line, err := in.ReadString('\n')
		if err != nil {
			break
		}
		fields := strings.Split(strings.TrimRight(line, "\n"), "\t")
		r, err := a.do(fields[0], fields[1:])
		if err != nil {
			r = reply{"ok": false, "error": err.Error()}
		} else {
			r["ok"] = true
		}
		b, _ := json.Marshal(r)
		out.Write(append(b, '\n'))
		out.Flush()
		if fields[0] == "quit" {
			break
		}
	}
	a.close()
}
