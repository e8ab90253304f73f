package tocsin_test

import (
	"context"
	"runtime/pprof"
	"testing"
	"time"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

// Idle listeners and subscriptions park their goroutines on Go's poller: 200 of each
// do not take an OS thread each (Go aborts a program past 10,000 threads), and every
// one still gets what is committed, and ends with its context.
func TestIdleWaitsTakeNoThreadEach(t *testing.T) {
	db := openDB(t)
	const n = 200
	before := pprof.Lookup("threadcreate").Count()
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	stream := db.Stream("s")
	zero := int64(0)
	var ls, subs []<-chan tocsin.Message
	for i := 0; i < n; i++ {
		l := must(db.Listen(ctx, "ch", nil))
		defer l.Close()
		ls = append(ls, l.C)
		sub := must(stream.Subscribe(ctx, "", &tocsin.SubscribeOptions{FromOffset: &zero}))
		defer sub.Close()
		subs = append(subs, sub.C)
	}
	time.Sleep(50 * time.Millisecond) // let every goroutine reach its wait (not a timing assertion)
	must(db.Notify(bg, "ch", 7, nil))
	must(stream.Publish(bg, 8, nil))
	for i := 0; i < n; i++ {
		for _, c := range [][]<-chan tocsin.Message{ls, subs} {
			select {
			case m := <-c[i]:
				if string(m.Payload) != "7" && string(m.Payload) != "8" {
					t.Fatalf("got %s", m.Payload)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("waiter %d got nothing", i)
			}
		}
	}
	if created := pprof.Lookup("threadcreate").Count() - before; created > n/4 {
		t.Fatalf("%d listeners and %d subscriptions created %d OS threads", n, n, created)
	}
	cancel()
	for i := 0; i < n; i++ {
		for _, c := range [][]<-chan tocsin.Message{ls, subs} {
			select {
			case _, ok := <-c[i]:
				if ok {
					t.Fatal("a value after cancel")
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("waiter %d did not end with its context", i)
			}
		}
	}
}
