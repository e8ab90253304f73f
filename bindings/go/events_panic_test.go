package tocsin_test

import (
	"fmt"
	"testing"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

// A loop body over Events that panics has not processed its event: the consumer's
// offset is saved before it, so the next loop gets it again; a break counts it.
func TestEventsPanicDoesNotCountTheEvent(t *testing.T) {
	db := openDB(t)
	s := db.Stream("p")
	vals := make([]any, 10)
	for i := range vals {
		vals[i] = i
	}
	offs := must(s.PublishMany(bg, vals, nil))
	for _, c := range []struct{ batch, failing int }{{100, 3}, {1, 5}, {3, 6}, {4, 0}, {10, 9}} {
		consumer := fmt.Sprintf("c%d_%d", c.batch, c.failing)
		func() {
			defer func() {
				if r := recover(); r != "handler failed" {
					t.Fatalf("%s: recovered %v", consumer, r)
				}
			}()
			for m, err := range s.Events(bg, consumer, &tocsin.SubscribeOptions{Batch: c.batch}) {
				check(t, err)
				if string(m.Payload) == fmt.Sprint(c.failing) {
					panic("handler failed")
				}
			}
		}()
		want := int64(0)
		if c.failing > 0 {
			want = offs[c.failing-1]
		}
		if got := must(s.Offset(bg, consumer)); got != want {
			t.Fatalf("%s: offset %d, want %d", consumer, got, want)
		}
		for m, err := range s.Events(bg, consumer, &tocsin.SubscribeOptions{Batch: c.batch}) {
			check(t, err)
			if string(m.Payload) != fmt.Sprint(c.failing) {
				t.Fatalf("%s: again %s", consumer, m.Payload)
			}
			break
		}
		if got := must(s.Offset(bg, consumer)); got != offs[c.failing] {
			t.Fatalf("%s: after the break %d, want %d", consumer, got, offs[c.failing])
		}
	}
}
