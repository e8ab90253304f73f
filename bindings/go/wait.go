package tocsin

/*
#include <stdlib.h>
#include "tocsin.h"

static tocsin_message *go_msg_at(tocsin_message *m, size_t i) { return &m[i]; }
#include <poll.h>
static int go_readable(int fd) { struct pollfd p = {fd, POLLIN, 0}; return poll(&p, 1, 0) > 0; }
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// pollWait parks a goroutine, not an OS thread, until the core's descriptor of a
// listener or stream subscription is readable (a wake, a poke): Go's poller watches a
// duplicate of it, and the core is read without blocking. Thousands of listeners then
// cost goroutines; a blocking read in the core would hold an OS thread each (Go aborts
// a program past 10,000). nil (a descriptor Go cannot poll) falls back to that read.
type pollWait struct {
	f  *os.File
	rc syscall.RawConn
}

func newPollWait(fd C.int) *pollWait {
	if fd < 0 {
		return nil
	}
	nfd, err := syscall.Dup(int(fd))
	if err != nil {
		return nil
	}
	syscall.CloseOnExec(nfd)
	if err := syscall.SetNonblock(nfd, true); err != nil {
		syscall.Close(nfd)
		return nil
	}
	f := os.NewFile(uintptr(nfd), "tocsin-wake")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil
	}
	return &pollWait{f: f, rc: rc}
}

// wait returns once the descriptor is readable (a wake is pending), false when Go cannot
// poll it. The look is made inside Read, after the poller forgot earlier readiness: a
// wake raised before it is seen there, one raised after it wakes the poller.
func (pw *pollWait) wait() bool {
	err := pw.rc.Read(func(fd uintptr) bool { return C.go_readable(C.int(fd)) != 0 })
	return err == nil
}

func (pw *pollWait) close() {
	if pw != nil {
		pw.f.Close()
	}
}

// next is one read of a listener or stream subscription: what is there now, else (with
// a pollWait) the goroutine parks until a wake or a poke and reads again; without one,
// the core's read blocks until ctx's deadline. A poke (ctx, Close) ends it as the
// blocking read would: ErrInterrupted.
func next(ctx context.Context, pw **pollWait, op string, read func(timeout C.int) C.int) error {
	for {
		if *pw == nil {
			return call(op, func() C.int { return read(timeoutMs(ctx)) })
		}
		err := call(op, func() C.int { return read(0) })
		if err == nil || !isCode(err, ErrTimeout) || ctx.Err() != nil {
			return err
		}
		if !(*pw).wait() {
			(*pw).close()
			*pw = nil
		}
	}
}

// blockingWait runs one of the core's waits that take a subscription (queue, result and
// lock waits) on the DB: a subscription of its own is opened for the call so that the
// context (or Close) can poke it, and deadline is the context's on the handle's clock.
func (db *DB) blockingWait(ctx context.Context, op string, f func(p *C.tocsin_db, deadline C.int64_t, sub *C.tocsin_sub) C.int) error {
	if err := nilCtx(op, ctx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return ctxErr(ctx, op)
	}
	p, release, err := db.acquire(op)
	if err != nil {
		return err
	}
	defer release()
	var sub *C.tocsin_sub
	if err := call(op, func() C.int { return C.tocsin_sub_open(&sub, p) }); err != nil {
		return err
	}
	defer C.tocsin_sub_close(sub)
	w := db.newWaiter(ctx, func() { C.tocsin_sub_poke(sub) })
	deadline := C.int64_t(-1)
	if dl, ok := ctx.Deadline(); ok {
		rem := time.Until(dl)
		if rem < 0 {
			rem = 0
		}
		deadline = C.tocsin_now(p) + C.int64_t(ms(rem+time.Millisecond-1))
	}
	own := db.heldByCaller() // see conn.do: its writes would wait for the caller's own lock
	err = call(op, func() C.int {
		if !own {
			return f(p, deadline, sub)
		}
		C.tocsin_thread_timeout(0)
		rc := f(p, deadline, sub)
		C.tocsin_thread_timeout(-1)
		return rc
	})
	w.finish()
	if own && isCode(err, ErrBusy) {
		return ownTxErr(op)
	}
	return waitErr(ctx, w, err, op)
}

// Wait blocks until something in the queue is claimable (nil), or until ctx ends (its
// error, matching ErrInterrupted or ErrTimeout) or the DB closes (ErrClosed). Idle, it
// only reads (tocsin_queue_wait).
func (q *Queue) Wait(ctx context.Context) error {
	if q.c.tx != nil {
		return newErr(ErrInvalid, "queue_wait", "waits are not available inside a transaction")
	}
	var cs cstrings
	defer cs.free()
	carr := (**C.char)(C.malloc(C.size_t(unsafe.Sizeof((*C.char)(nil)))))
	defer C.free(unsafe.Pointer(carr))
	*carr = cs.str(q.name)
	if err := cs.check("queue_wait"); err != nil {
		return err
	}
	return q.c.db.blockingWait(ctx, "queue_wait", func(p *C.tocsin_db, dl C.int64_t, sub *C.tocsin_sub) C.int {
		return C.tocsin_queue_wait(p, carr, 1, dl, sub)
	})
}

// ---- messages ----

// Message is a stream event or a notification.
type Message struct {
	ID        int64           // the stream offset or notification id
	Name      string          // topic or channel
	Key       string          // stream events: the partition/ordering key
	Payload   json.RawMessage // JSON text
	Meta      json.RawMessage // JSON object or nil
	CreatedAt time.Time
}

// Decode unmarshals the payload into v.
func (m *Message) Decode(v any) error { return json.Unmarshal(m.Payload, v) }

func messagesFrom(msgs *C.tocsin_message, n C.size_t) []Message {
	out := make([]Message, int(n))
	for i := range out {
		m := C.go_msg_at(msgs, C.size_t(i))
		out[i] = Message{ID: int64(m.id), Name: goStr(m.name), Key: goStr(m.key),
			Payload: raw(m.payload), Meta: raw(m.meta), CreatedAt: fromMs(int64(m.created_at))}
	}
	C.tocsin_messages_free(msgs, n)
	return out
}

// ---- listen ----

// ListenOptions of Listen.
type ListenOptions struct {
	// BufferSize (1..10000; 0: 1000) bounds how far behind a slow reader of C falls:
	// besides the one notification offered on C (C is unbuffered: the listener's
	// goroutine waits to hand it over), at most the newest BufferSize wait for the
	// reader; when more arrive, the oldest are dropped (counted by Dropped). Use a
	// stream for lossless delivery.
	BufferSize int
}

// Listener receives the notifications of one channel from the moment Listen returned.
// C delivers them until the context ends, Close is called or the DB closes; then C is
// closed and Err tells why.
type Listener struct {
	C    <-chan Message
	l    *C.tocsin_listener
	w    *waiter
	done chan struct{}
	err  error
	stop context.CancelCauseFunc
	pw   *pollWait // the goroutine's wait (nil: it blocks in the core)
	size int
	// notifications the goroutine dropped from its own batch (it owns the count); the
	// core counts those it dropped before handing a batch over
	goDropped int64
	// the counters as they were at close (the C object is gone then)
	dropped atomic.Int64
}

// Listen listens on channel (NOTIFY/LISTEN): one goroutine per listener waits on Go's
// poller (no OS thread of its own while idle) and ends with ctx.
func (db *DB) Listen(ctx context.Context, channel string, opts *ListenOptions) (*Listener, error) {
	size := 1000
	if opts != nil && opts.BufferSize != 0 {
		// (the core's message names buffer_size)
		if _, err := count("listen", "ListenOptions.BufferSize", opts.BufferSize, C.TOCSIN_MAX_BATCH, "1000"); err != nil {
			return nil, err
		}
		size = opts.BufferSize
	}
	var cs cstrings
	defer cs.free()
	cch := cs.str(channel)
	var l *C.tocsin_listener
	if err := db.doCS(ctx, &cs, "listen", func(p *C.tocsin_db) C.int {
		return C.tocsin_listen_open(&l, p, cch, C.size_t(size))
	}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	ch := make(chan Message)
	li := &Listener{C: ch, l: l, done: make(chan struct{}), stop: cancel, size: size,
		pw: newPollWait(C.tocsin_listen_fd(l))}
	li.w = db.newWaiter(ctx, func() { C.tocsin_listen_poke(l) })
	go li.run(ctx, ch)
	return li, nil
}

func (li *Listener) run(ctx context.Context, ch chan<- Message) {
	defer close(ch) // after done: Err is set once C is closed
	defer close(li.done)
	defer func() {
		// no poke reaches the listener once detached; Close returns after leave, when
		// the listener is closed
		li.w.detach()
		li.storeDropped()
		li.pw.close()
		if err := call("listen", func() C.int { return C.tocsin_listen_close(li.l) }); err != nil {
			li.err = errors.Join(li.err, err)
		}
		li.w.leave()
	}()
	// The batch in hand: the core bounds each batch by BufferSize, and the goroutine
	// keeps that bound while it waits for the reader: before a hand-over the reader is
	// not ready for (and after one it had to wait for), what arrived meanwhile joins
	// the batch and the oldest beyond BufferSize are dropped.
	var batch []Message
	waited := false
	for {
		if len(batch) == 0 {
			var msgs *C.tocsin_message
			var n C.size_t
			err := next(ctx, &li.pw, "listen", func(t C.int) C.int { return C.tocsin_listen_next(li.l, &msgs, &n, t) })
			if err != nil {
				if ctx.Err() == nil && !li.w.isDBClosed() && (isCode(err, ErrInterrupted) || isCode(err, ErrTimeout)) {
					continue // a stale poke: wait again
				}
				li.err = waitErr(ctx, li.w, err, "listen")
				return
			}
			batch = messagesFrom(msgs, n)
			li.storeDropped()
			waited = false
		}
		if err := ended(ctx, li.w, "listen"); err != nil {
			li.err = err
			return
		}
		if waited {
			if err := li.topUp(ctx, &batch); err != nil {
				li.err = err
				return
			}
		}
		select {
		case ch <- batch[0]: // the reader was ready
			batch = batch[1:]
			waited = false
			continue
		default:
		}
		if !waited {
			if err := li.topUp(ctx, &batch); err != nil {
				li.err = err
				return
			}
		}
		select {
		case ch <- batch[0]:
			batch = batch[1:]
			waited = true
		case <-ctx.Done():
			li.err = ctxErr(ctx, "listen")
			return
		case <-li.w.closedCh: // Close does not wait for a reader of C that is gone
			li.err = newErr(ErrClosed, "listen", "the database was closed")
			return
		}
	}
}

// topUp adds to the batch in hand what arrived since it was read (a non-blocking read,
// made only while a wake is pending) and drops its oldest beyond BufferSize.
func (li *Listener) topUp(ctx context.Context, batch *[]Message) error {
	if li.pw != nil && C.go_readable(C.tocsin_listen_fd(li.l)) == 0 {
		return nil // nothing was committed since the last read
	}
	var msgs *C.tocsin_message
	var n C.size_t
	err := call("listen", func() C.int { return C.tocsin_listen_next(li.l, &msgs, &n, 0) })
	if err != nil {
		if isCode(err, ErrTimeout) || isCode(err, ErrInterrupted) {
			return nil // nothing new, or a poke: the select that follows sees its reason
		}
		return waitErr(ctx, li.w, err, "listen")
	}
	b := append(*batch, messagesFrom(msgs, n)...)
	if over := len(b) - li.size; over > 0 {
		li.goDropped += int64(over)
		b = b[over:]
	}
	*batch = b
	li.storeDropped()
	return nil
}

func (li *Listener) storeDropped() {
	li.dropped.Store(int64(C.tocsin_listen_dropped(li.l)) + li.goDropped)
}

// ended is the error of a wait whose context ended or whose DB closed (nil while neither).
func ended(ctx context.Context, w *waiter, op string) error {
	if w.isDBClosed() {
		return newErr(ErrClosed, op, "the database was closed")
	}
	return ctxErr(ctx, op)
}

func isCode(err error, c Code) bool {
	e, ok := err.(*Error)
	return ok && e.Code == c
}

// Dropped counts notifications lost to the bounded buffer so far (see
// ListenOptions.BufferSize).
func (li *Listener) Dropped() int64 { return li.dropped.Load() }

// Close stops the listener and waits for its goroutine to end; Err then reports
// ErrClosed (unless the listener had ended before, for another reason). As
// Subscription.Close, Close returns the error the listener had ended with if neither
// Close nor its context ended it (ErrClosed by DB.Close, ErrReplaced, ...), else nil;
// again, the same.
func (li *Listener) Close() error {
	li.stop(&closedByUser{"the listener"})
	<-li.done
	if endedByOwner(li.err) {
		return nil
	}
	return li.err
}

// Err is why C was closed (nil before): ErrClosed after Close or DB.Close, the
// context's error (matching ErrInterrupted or ErrTimeout), ErrReplaced, ...
func (li *Listener) Err() error {
	select {
	case <-li.done:
		return li.err
	default:
		return nil
	}
}

// ---- streams ----

// Stream is a durable topic.
type Stream struct {
	c     *conn
	topic string
}

// Stream names a topic.
func (c *conn) Stream(topic string) *Stream { return &Stream{c: c, topic: topic} }

// Topic is the stream's topic.
func (s *Stream) Topic() string { return s.topic }

// PublishOptions of Publish.
type PublishOptions struct {
	Key  string // partition/ordering key
	Meta any    // JSON object of headers
}

// Publish appends an event and returns its offset.
func (s *Stream) Publish(ctx context.Context, v any, opts *PublishOptions) (int64, error) {
	payload, err := marshal(v, "Publish payload")
	if err != nil {
		return 0, err
	}
	var cs cstrings
	defer cs.free()
	var key, meta *C.char
	if opts != nil {
		key = cs.opt(opts.Key)
		m, err := marshalOpt(opts.Meta, "PublishOptions.Meta")
		if err != nil {
			return 0, err
		}
		meta = cs.opt(m)
	}
	ct, cp := cs.str(s.topic), cs.str(payload)
	var off C.int64_t
	err = s.c.doCS(ctx, &cs, "publish", func(p *C.tocsin_db) C.int {
		return C.tocsin_stream_publish(p, &off, ct, cp, key, meta)
	})
	return int64(off), err
}

// PublishMany appends events atomically; keys is nil or one key ("" for none) per event.
// No events: an empty slice, nothing written (the topic is still checked).
func (s *Stream) PublishMany(ctx context.Context, values []any, keys []string) ([]int64, error) {
	n := len(values)
	if keys != nil && len(keys) != n {
		return nil, newErr(ErrInvalid, "publish_many", "keys must be nil or one per event")
	}
	var cs cstrings
	defer cs.free()
	if n == 0 {
		// the core's answer to an empty batch: it checks the topic, writes nothing
		ct := cs.str(s.topic)
		var off C.int64_t
		err := s.c.doCS(ctx, &cs, "publish_many", func(p *C.tocsin_db) C.int {
			return C.tocsin_stream_publish_many(p, &off, ct, nil, nil, 0)
		})
		if err != nil {
			return nil, err
		}
		return []int64{}, nil
	}
	ptrSize := C.size_t(unsafe.Sizeof((*C.char)(nil)))
	pays := (*[1 << 28]*C.char)(C.calloc(C.size_t(n), ptrSize))[:n:n]
	defer C.free(unsafe.Pointer(&pays[0]))
	var ks []*C.char
	var kp **C.char
	if keys != nil {
		ks = (*[1 << 28]*C.char)(C.calloc(C.size_t(n), ptrSize))[:n:n]
		defer C.free(unsafe.Pointer(&ks[0]))
		kp = &ks[0]
	}
	for i, v := range values {
		payload, err := marshal(v, fmt.Sprintf("PublishMany payload of event %d", i))
		if err != nil {
			return nil, err
		}
		pays[i] = cs.str(payload)
		if keys != nil {
			ks[i] = cs.opt(keys[i])
		}
	}
	ct := cs.str(s.topic)
	offs := make([]C.int64_t, n)
	err := s.c.doCS(ctx, &cs, "publish_many", func(p *C.tocsin_db) C.int {
		return C.tocsin_stream_publish_many(p, &offs[0], ct, &pays[0], kp, C.size_t(n))
	})
	if err != nil {
		return nil, err
	}
	out := make([]int64, n)
	for i := range offs {
		out[i] = int64(offs[i])
	}
	return out, nil
}

// Read returns events with offset > after, oldest first (limit 0: 100).
func (s *Stream) Read(ctx context.Context, after int64, limit int) ([]Message, error) {
	if limit == 0 {
		limit = 100
	}
	if limit < 0 {
		return nil, newErr(ErrInvalid, "stream_read", "limit must be >= 1")
	}
	var cs cstrings
	defer cs.free()
	ct := cs.str(s.topic)
	var msgs *C.tocsin_message
	var n C.size_t
	if err := s.c.doCS(ctx, &cs, "stream_read", func(p *C.tocsin_db) C.int {
		return C.tocsin_stream_read(p, &msgs, &n, ct, C.int64_t(after), C.size_t(limit))
	}); err != nil {
		return nil, err
	}
	return messagesFrom(msgs, n), nil
}

// SaveOffset stores consumer's offset (offsets only move forward) and returns the one stored.
func (s *Stream) SaveOffset(ctx context.Context, consumer string, offset int64) (int64, error) {
	var cs cstrings
	defer cs.free()
	cc, ct := cs.str(consumer), cs.str(s.topic)
	var stored C.int64_t
	err := s.c.doCS(ctx, &cs, "save_offset", func(p *C.tocsin_db) C.int {
		return C.tocsin_stream_save_offset(p, &stored, cc, ct, C.int64_t(offset))
	})
	return int64(stored), err
}

// Offset is consumer's saved offset (0 if none).
func (s *Stream) Offset(ctx context.Context, consumer string) (int64, error) {
	var cs cstrings
	defer cs.free()
	cc, ct := cs.str(consumer), cs.str(s.topic)
	var off C.int64_t
	err := s.c.doCS(ctx, &cs, "offset", func(p *C.tocsin_db) C.int {
		return C.tocsin_stream_offset(p, &off, cc, ct)
	})
	return int64(off), err
}

// TrimOptions of Trim: events matching any criterion set are deleted.
type TrimOptions struct {
	MaxAge         time.Duration // older than this
	MaxCount       int64         // all but the newest MaxCount
	BelowConsumers bool          // passed by every consumer of the topic
}

// Trim deletes events and counts them.
func (s *Stream) Trim(ctx context.Context, opts TrimOptions) (int64, error) {
	// (the core's messages name max_age_ms and max_count)
	if err := nonNeg("stream_trim", "TrimOptions.MaxAge", opts.MaxAge); err != nil {
		return 0, err
	}
	if opts.MaxCount < 0 {
		return 0, newErr(ErrInvalid, "stream_trim", fmt.Sprintf("TrimOptions.MaxCount must be >= 0, not %d", opts.MaxCount))
	}
	if opts.MaxAge == 0 && opts.MaxCount == 0 && !opts.BelowConsumers {
		return 0, newErr(ErrInvalid, "stream_trim", "trim needs TrimOptions.MaxAge, MaxCount or BelowConsumers")
	}
	var cs cstrings
	defer cs.free()
	ct := cs.str(s.topic)
	var o C.tocsin_trim_opts
	o.version = C.TOCSIN_TRIM_OPTS_VERSION
	o.max_age_ms = C.int64_t(ms(opts.MaxAge))
	o.max_count = C.int64_t(opts.MaxCount)
	if opts.BelowConsumers {
		o.below_consumers = 1
	}
	var n C.int64_t
	err := s.c.doCS(ctx, &cs, "stream_trim", func(p *C.tocsin_db) C.int { return C.tocsin_stream_trim(p, &n, ct, &o) })
	return int64(n), err
}

// SubscribeOptions of Subscribe and Events.
type SubscribeOptions struct {
	FromOffset    *int64        // nil: after the consumer's saved offset; else after this offset
	Batch         int           // events per read, 1..10000; 0: 100
	AutosaveEvery int64         // > 0: save the consumer's offset every N processed events
	AutosaveAfter time.Duration // > 0: ... or when this long passed since the last save
	// A named consumer's offset is saved when the subscription ends (Close, the context,
	// the end of an Events loop): the last event handed on. NoSaveOnClose leaves it.
	NoSaveOnClose bool
}

func (db *DB) openStreamSub(ctx context.Context, topic, consumer string, opts *SubscribeOptions) (*C.tocsin_stream_sub, error) {
	var o C.tocsin_stream_sub_opts
	o.version = C.TOCSIN_STREAM_SUB_OPTS_VERSION
	o.from_offset = -1
	if opts != nil {
		if opts.FromOffset != nil {
			if *opts.FromOffset < 0 {
				return nil, newErr(ErrInvalid, "subscribe", fmt.Sprintf("SubscribeOptions.FromOffset must be >= 0, not %d", *opts.FromOffset))
			}
			o.from_offset = C.int64_t(*opts.FromOffset)
		}
		// (the core's messages name batch, autosave_every and autosave_ms)
		batch, err := count("subscribe", "SubscribeOptions.Batch", opts.Batch, C.TOCSIN_MAX_BATCH, "100")
		if err != nil {
			return nil, err
		}
		if opts.AutosaveEvery < 0 {
			return nil, newErr(ErrInvalid, "subscribe", fmt.Sprintf("SubscribeOptions.AutosaveEvery must be >= 0, not %d", opts.AutosaveEvery))
		}
		if err := nonNeg("subscribe", "SubscribeOptions.AutosaveAfter", opts.AutosaveAfter); err != nil {
			return nil, err
		}
		o.batch = C.size_t(batch)
		o.autosave_every = C.int64_t(opts.AutosaveEvery)
		o.autosave_ms = C.int64_t(ms(opts.AutosaveAfter))
	}
	if consumer != "" && (opts == nil || !opts.NoSaveOnClose) {
		o.save_on_close = 1 // the core saves at tocsin_stream_sub_close
	}
	var cs cstrings
	defer cs.free()
	ct, cc := cs.str(topic), cs.opt(consumer)
	var s *C.tocsin_stream_sub
	err := db.doCS(ctx, &cs, "subscribe", func(p *C.tocsin_db) C.int {
		return C.tocsin_stream_sub_open(&s, p, ct, cc, &o)
	})
	return s, err
}

func (s *Stream) dbOnly(op string) (*DB, error) {
	if s.c.tx != nil {
		return nil, newErr(ErrInvalid, op, "subscriptions are not available inside a transaction")
	}
	return s.c.db, nil
}

// Subscription replays a topic from the consumer's saved offset, then delivers live
// events on C until the context ends, Close is called or the DB closes.
type Subscription struct {
	C    <-chan Message
	s    *C.tocsin_stream_sub
	w    *waiter
	done chan struct{}
	err  error // why it ended
	// the failure of the save that ended it (the consumer's offset, at close): the
	// events after the saved offset come again
	saveErr error
	stop    context.CancelCauseFunc
	// the position as it was at close
	position atomic.Int64
	as       *autosaver // nil without autosave
	pw       *pollWait  // the goroutine's wait (nil: it blocks in the core)
}

// Subscribe subscribes consumer (may be "" with FromOffset and no autosave) to the topic,
// delivering on a channel. An event counts as processed (for autosave) once the next
// one was received; use Events for "processed when the loop body returned".
func (s *Stream) Subscribe(ctx context.Context, consumer string, opts *SubscribeOptions) (*Subscription, error) {
	db, err := s.dbOnly("subscribe")
	if err != nil {
		return nil, err
	}
	// The core's autosave counts a batch as processed at the next read, but the last
	// event of a batch is then only received on C, perhaps not processed: the autosave
	// is done here instead, an event counting once the next one was received.
	var as *autosaver
	if consumer != "" && opts != nil && (opts.AutosaveEvery > 0 || opts.AutosaveAfter > 0) {
		as = &autosaver{db: db, every: opts.AutosaveEvery, afterMs: ms(opts.AutosaveAfter),
			noSaveOnClose: opts.NoSaveOnClose, consumer: consumer, topic: s.topic}
		o := *opts
		o.AutosaveEvery, o.AutosaveAfter = 0, 0
		opts = &o
	}
	ss, err := db.openStreamSub(ctx, s.topic, consumer, opts)
	if err != nil {
		return nil, err
	}
	if as != nil {
		as.savedAt = as.now()
	}
	ctx, cancel := context.WithCancelCause(ctx)
	ch := make(chan Message)
	sub := &Subscription{C: ch, s: ss, done: make(chan struct{}), stop: cancel, as: as,
		pw: newPollWait(C.tocsin_stream_sub_fd(ss))}
	sub.w = db.newWaiter(ctx, func() { C.tocsin_stream_sub_poke(ss) })
	go sub.run(ctx, ch)
	return sub, nil
}

// autosaver is a channel Subscription's autosave (owned by its goroutine).
type autosaver struct {
	db              *DB
	every, afterMs  int64
	noSaveOnClose   bool
	consumer, topic string
	processed       int64 // the last processed event's offset (0: none yet)
	unsaved         int64 // processed events not saved yet
	savedAt         int64 // handle's clock (ms) at the last save
}

// now is the handle's clock; 0 once the DB was closed (no save is due by age then: the
// subscription ends with ErrClosed).
func (a *autosaver) now() int64 {
	var t C.int64_t
	_ = a.db.do(context.Background(), "subscribe", func(p *C.tocsin_db) C.int { t = C.tocsin_now(p); return 0 })
	return int64(t)
}

// done records that the event at off was processed (the next one was received on C)
// and saves when autosave is due.
func (a *autosaver) done(off int64) error {
	a.processed = off
	a.unsaved++
	return a.due()
}

// due saves the processed events when their count or age calls for it.
func (a *autosaver) due() error {
	if a.unsaved == 0 || !((a.every > 0 && a.unsaved >= a.every) || (a.afterMs > 0 && a.now()-a.savedAt >= a.afterMs)) {
		return nil
	}
	return a.save()
}

func (a *autosaver) save() error {
	var cs cstrings
	defer cs.free()
	cc, ct := cs.str(a.consumer), cs.str(a.topic)
	off := C.int64_t(a.processed)
	err := a.db.doCS(context.Background(), &cs, "subscribe", func(p *C.tocsin_db) C.int {
		return C.tocsin_stream_save_offset(p, nil, cc, ct, off)
	})
	if err == nil {
		a.unsaved = 0
		a.savedAt = a.now()
	}
	return err
}

func (sub *Subscription) run(ctx context.Context, ch chan<- Message) {
	defer close(ch)
	defer close(sub.done)
	defer func() {
		// detached, the subscription gets no poke; Close returns after leave, once the
		// close (and the consumer's offset it saves) is done
		sub.w.detach()
		sub.position.Store(int64(C.tocsin_stream_sub_position(sub.s)))
		// without the save on close, what was processed is saved (as the core's autosave did)
		if as := sub.as; as != nil && as.noSaveOnClose && as.unsaved > 0 && !sub.w.isDBClosed() {
			if err := as.save(); err != nil {
				sub.saveErr = errors.Join(sub.saveErr, err)
			}
		}
		sub.pw.close()
		if err := call("subscribe", func() C.int { return C.tocsin_stream_sub_close(sub.s) }); err != nil {
			sub.saveErr = errors.Join(sub.saveErr, err)
		}
		sub.w.leave()
	}()
	var prev int64 // the last event received on C
	for {
		if sub.as != nil {
			if err := sub.as.due(); err != nil { // by age, while no event comes
				sub.err = err
				return
			}
		}
		msgs, err := streamNext(ctx, sub.s, &sub.pw, sub.w)
		if err != nil {
			sub.err = err
			return
		}
		for i, m := range msgs {
			if err := ended(ctx, sub.w, "subscribe"); err != nil {
				sub.err = err
				sub.saveErr = stoppedAt(sub.s, msgs, i)
				return
			}
			select {
			case ch <- m:
				if sub.as != nil && prev != 0 {
					if err := sub.as.done(prev); err != nil {
						sub.err = err
						sub.saveErr = stoppedAt(sub.s, msgs, i+1)
						return
					}
				}
				prev = m.ID
			case <-ctx.Done():
				sub.err = ctxErr(ctx, "subscribe")
				sub.saveErr = stoppedAt(sub.s, msgs, i)
				return
			case <-sub.w.closedCh: // Close does not wait for a reader of C that is gone
				sub.err = newErr(ErrClosed, "subscribe", "the database was closed")
				sub.saveErr = stoppedAt(sub.s, msgs, i)
				return
			}
		}
	}
}

// stoppedAt: of a batch, only the events before i were handed on; the core's position
// goes back to the last of them (what the close then saves). Its failure is the
// subscription's end's: the close would save past the events not handed on.
func stoppedAt(s *C.tocsin_stream_sub, msgs []Message, i int) error {
	if i >= len(msgs) {
		return nil
	}
	off := msgs[0].ID - 1 // none of it: below the batch's first event
	if i > 0 {
		off = msgs[i-1].ID
	}
	return call("subscribe", func() C.int { return C.tocsin_stream_sub_rewind(s, C.int64_t(off)) })
}

func streamNext(ctx context.Context, s *C.tocsin_stream_sub, pw **pollWait, w *waiter) ([]Message, error) {
	for {
		var msgs *C.tocsin_message
		var n C.size_t
		err := next(ctx, pw, "subscribe", func(t C.int) C.int { return C.tocsin_stream_sub_next(s, &msgs, &n, t) })
		if err == nil {
			return messagesFrom(msgs, n), nil
		}
		if ctx.Err() == nil && !w.isDBClosed() && (isCode(err, ErrInterrupted) || isCode(err, ErrTimeout)) {
			continue
		}
		return nil, waitErr(ctx, w, err, "subscribe")
	}
}

// Position is the offset of the last event handed out, once the subscription has
// ended (while it runs, the goroutine owns the core's subscription).
func (sub *Subscription) Position() int64 { return sub.position.Load() }

// Close stops the subscription and waits for its goroutine. A named consumer's offset is
// saved (the last event delivered on C) unless NoSaveOnClose. Err then reports ErrClosed
// (unless the subscription had ended before, for another reason). Close returns the
// failure of that save (the events after the offset saved before come again), else the
// error the subscription had ended with if neither Close nor its context ended it
// (ErrClosed by DB.Close, ErrReplaced, ...), else nil; again, the same.
func (sub *Subscription) Close() error {
	sub.stop(&closedByUser{"the subscription"})
	<-sub.done
	if endedByOwner(sub.err) {
		return sub.saveErr
	}
	return sub.Err()
}

// Err is why C was closed (nil before): ErrClosed after Close or DB.Close, the context's
// error (matching ErrInterrupted or ErrTimeout), ErrReplaced, ...; joined with the
// failure of the offset save at the end, if any.
func (sub *Subscription) Err() error {
	select {
	case <-sub.done:
		return errors.Join(sub.err, sub.saveErr)
	default:
		return nil
	}
}

// Events iterates the topic for consumer in the caller's goroutine (no goroutine of its
// own): replay, then live, until ctx ends (the last pair carries its error) or the loop
// breaks. A named consumer's offset is saved at the end (the last event the loop body
// got, also when it breaks mid-batch) unless NoSaveOnClose; autosave saves as it goes.
// A loop body that panics has not processed its event: the offset saved is the one
// before it, so it comes again (at-least-once). When the iteration ends with an error,
// a failure of that final save is joined to it (the last pair); after a break no pair
// can carry it: use Consumer and its Err to learn it.
func (s *Stream) Events(ctx context.Context, consumer string, opts *SubscribeOptions) iter.Seq2[Message, error] {
	return s.Consumer(ctx, consumer, opts).Events()
}

// A Consumer is Events with an Err to check after the loop, as a break ends it before
// the offset save at its end could be reported in the loop.
type Consumer struct {
	s        *Stream
	ctx      context.Context
	consumer string
	opts     *SubscribeOptions
	mu       sync.Mutex
	err      error
}

// Consumer is Events(ctx, consumer, opts) with Err: range over its Events, then check
// Err.
func (s *Stream) Consumer(ctx context.Context, consumer string, opts *SubscribeOptions) *Consumer {
	return &Consumer{s: s, ctx: ctx, consumer: consumer, opts: opts}
}

// Err is how the last iteration of Events ended (nil while one runs or before): the
// error of its last pair (the context's, ErrClosed, ...), or the failure of the save of
// the consumer's offset at its end -- then the events after the offset saved before
// come again (none is lost) -- or both joined; nil after a break whose save worked.
func (c *Consumer) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Consumer) setErr(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
}

// Events is the iterator of Stream.Events; each range over it subscribes anew.
func (c *Consumer) Events() iter.Seq2[Message, error] {
	s, ctx, consumer, opts := c.s, c.ctx, c.consumer, c.opts
	return func(yield func(Message, error) bool) {
		c.setErr(nil)
		db, err := s.dbOnly("subscribe")
		if err != nil {
			c.setErr(err)
			yield(Message{}, err)
			return
		}
		ss, err := db.openStreamSub(ctx, s.topic, consumer, opts)
		if err != nil {
			c.setErr(err)
			yield(Message{}, err)
			return
		}
		// Of the last batch, the first handed events reached the loop body: whatever ends
		// the loop (break, return, panic, ctx, Close), the position goes back to the last
		// of them before the close saves it.
		var batch []Message
		handed := 0
		inBody := false // the loop body has the last handed event and has not returned
		pw := newPollWait(C.tocsin_stream_sub_fd(ss))
		closed := false
		closeSub := func() error {
			closed = true
			if inBody { // it panicked: that event was not processed, it comes again
				handed--
			}
			err := stoppedAt(ss, batch, handed)
			pw.close()
			return errors.Join(err, call("subscribe", func() C.int { return C.tocsin_stream_sub_close(ss) }))
		}
		defer func() {
			if !closed { // a break, a return or a panic of the loop body
				c.setErr(closeSub())
			}
		}()
		// end: the iteration ends with err; the close (and its save) comes first, so
		// that the last pair carries the save's failure too
		end := func(err error) {
			err = errors.Join(err, closeSub())
			c.setErr(err)
			yield(Message{}, err)
		}
		poke := func() { C.tocsin_stream_sub_poke(ss) }
		for {
			// The waiter is registered only while the core waits, not while the loop
			// body runs: a body that closes the DB does not wait for itself.
			w := db.newWaiter(ctx, poke)
			msgs, err := streamNext(ctx, ss, &pw, w)
			w.finish()
			if err != nil {
				end(err)
				return
			}
			batch, handed = msgs, 0
			for _, m := range msgs {
				if err := ctx.Err(); err != nil || db.closed.Load() {
					err := ctxErr(ctx, "subscribe")
					if db.closed.Load() {
						err = newErr(ErrClosed, "subscribe", "the database was closed")
					}
					end(err)
					return
				}
				handed++
				inBody = true
				more := yield(m, nil)
				inBody = false
				if !more {
					return
				}
			}
		}
	}
}

// ---- notify ----

// Notify records a notification of channel (in the transaction, from a Tx) and returns its id.
func (c *conn) Notify(ctx context.Context, channel string, v any, meta any) (int64, error) {
	payload, err := marshal(v, "Notify payload")
	if err != nil {
		return 0, err
	}
	m, err := marshalOpt(meta, "Notify meta")
	if err != nil {
		return 0, err
	}
	var cs cstrings
	defer cs.free()
	cc, cp, cm := cs.str(channel), cs.str(payload), cs.opt(m)
	var id C.int64_t
	err = c.doCS(ctx, &cs, "notify", func(p *C.tocsin_db) C.int { return C.tocsin_notify(p, &id, cc, cp, cm) })
	return int64(id), err
}

// Notifications reads channel's notifications with id > afterID (limit 0: 100).
func (c *conn) Notifications(ctx context.Context, channel string, afterID int64, limit int) ([]Message, error) {
	if limit == 0 {
		limit = 100
	}
	if limit < 0 {
		return nil, newErr(ErrInvalid, "notify_read", "limit must be >= 1")
	}
	var cs cstrings
	defer cs.free()
	cc := cs.str(channel)
	var msgs *C.tocsin_message
	var n C.size_t
	if err := c.doCS(ctx, &cs, "notify_read", func(p *C.tocsin_db) C.int {
		return C.tocsin_notify_read(p, &msgs, &n, cc, C.int64_t(afterID), C.size_t(limit))
	}); err != nil {
		return nil, err
	}
	return messagesFrom(msgs, n), nil
}

// NotifyMaxID is the highest notification id so far (0 if none).
func (c *conn) NotifyMaxID(ctx context.Context) (int64, error) {
	var id C.int64_t
	err := c.do(ctx, "notify_max_id", func(p *C.tocsin_db) C.int { return C.tocsin_notify_max_id(p, &id) })
	return int64(id), err
}

// PruneNotifications deletes notifications older than maxAge and, per channel, all but
// the newest maxKeep (0 disables a criterion).
func (c *conn) PruneNotifications(ctx context.Context, maxAge time.Duration, maxKeep int64) (int64, error) {
	if err := nonNeg("notify_prune", "maxAge", maxAge); err != nil {
		return 0, err
	}
	if maxKeep < 0 {
		return 0, newErr(ErrInvalid, "notify_prune", fmt.Sprintf("maxKeep must be >= 0, not %d", maxKeep))
	}
	var n C.int64_t
	err := c.do(ctx, "notify_prune", func(p *C.tocsin_db) C.int {
		return C.tocsin_notify_prune(p, &n, C.int64_t(ms(maxAge)), C.int64_t(maxKeep))
	})
	return int64(n), err
}

// SetNotifyAutotrim stores the automatic trim policy (oneIn 0: off).
func (c *conn) SetNotifyAutotrim(ctx context.Context, maxAge time.Duration, maxKeep, oneIn int64) error {
	// (the core's messages name max_age_ms, max_keep and one_in)
	if err := nonNeg("notify_autotrim", "maxAge", maxAge); err != nil {
		return err
	}
	if maxKeep < 0 {
		return newErr(ErrInvalid, "notify_autotrim", fmt.Sprintf("maxKeep must be >= 0, not %d", maxKeep))
	}
	if oneIn < 0 {
		return newErr(ErrInvalid, "notify_autotrim", fmt.Sprintf("oneIn must be >= 0 (0: off), not %d", oneIn))
	}
	if oneIn > 0 && maxAge == 0 && maxKeep == 0 {
		return newErr(ErrInvalid, "notify_autotrim", "auto-trim needs maxAge or maxKeep (oneIn 0 turns it off)")
	}
	return c.do(ctx, "notify_autotrim", func(p *C.tocsin_db) C.int {
		return C.tocsin_notify_set_autotrim(p, C.int64_t(ms(maxAge)), C.int64_t(maxKeep), C.int64_t(oneIn))
	})
}
