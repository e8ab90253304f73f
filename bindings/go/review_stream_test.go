package tocsin_test

import (
	"testing"
	"time"

	tocsin "github.com/tocsin-db/tocsin/bindings/go"
)

// A channel Subscription's autosave counts an event as processed once the next one was
// received on C: the last event of a batch (live, often the only one) was saved as soon
// as it was received, so a consumer that crashed while processing it never got it again.
func TestSubscribeAutosaveWaitsForTheNextEvent(t *testing.T) {
	db := openDB(t)
	s := db.Stream("t")
	var offs []int64
	for i := 0; i < 3; i++ {
		offs = append(offs, must(s.Publish(bg, i, nil)))
	}
	sub := must(s.Subscribe(bg, "c", &tocsin.SubscribeOptions{Batch: 1, AutosaveEvery: 1, NoSaveOnClose: true}))
	if m := <-sub.C; m.ID != offs[0] {
		t.Fatal(m.ID)
	}
	time.Sleep(50 * time.Millisecond) // the goroutine reads the next batch meanwhile
	if v := must(s.Offset(bg, "c")); v != 0 {
		t.Fatal("the event being processed was saved as processed", v)
	}
	if m := <-sub.C; m.ID != offs[1] {
		t.Fatal(m.ID)
	}
	waitFor(t, func() bool { return must(s.Offset(bg, "c")) == offs[0] })
	time.Sleep(50 * time.Millisecond)
	if v := must(s.Offset(bg, "c")); v != offs[0] {
		t.Fatal("saved past the processed events", v)
	}
	// without the save on close, Close saves what was processed (not the last received)
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if v := must(s.Offset(bg, "c")); v != offs[0] {
		t.Fatal(v)
	}
	// with it, Close saves the last event delivered; autosave by count over bigger batches
	sub = must(s.Subscribe(bg, "d", &tocsin.SubscribeOptions{AutosaveEvery: 2}))
	for i := 0; i < 3; i++ {
		if m := <-sub.C; m.ID != offs[i] {
			t.Fatal(m.ID)
		}
	}
	waitFor(t, func() bool { return must(s.Offset(bg, "d")) == offs[1] })
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if v := must(s.Offset(bg, "d")); v != offs[2] {
		t.Fatal(v)
	}
	// autosave by age, on the handle's clock
	db.SetTime(time.UnixMilli(1_700_000_000_000))
	sub = must(s.Subscribe(bg, "e", &tocsin.SubscribeOptions{AutosaveAfter: time.Second, NoSaveOnClose: true}))
	<-sub.C
	<-sub.C
	time.Sleep(20 * time.Millisecond)
	if v := must(s.Offset(bg, "e")); v != 0 {
		t.Fatal("saved before the interval", v)
	}
	db.SetTime(time.UnixMilli(1_700_000_001_000))
	<-sub.C
	waitFor(t, func() bool { return must(s.Offset(bg, "e")) == offs[1] })
	sub.Close()
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not reached in 5 s")
}
