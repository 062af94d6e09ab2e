package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
)

// TestList: a client lists the held locks of its namespace by prefix,
// page by page, over every group's master: each key once, in order, with
// holder, token, value, readers and waiters; another namespace's locks
// are not shown.
func TestList(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, d := newClient(t, tc), newClient(t, tc)
	held := map[string]*client.Mutex{}
	for i := range 25 {
		key := fmt.Sprintf("job/%02d", i)
		m := c.Mutex(key, client.TTL(time.Minute), client.Value(fmt.Sprintf("worker-%d", i)))
		if err := m.TryLock(ctx); err != nil {
			t.Fatal(err)
		}
		held[key] = m
	}
	if err := c.Mutex("other/x").TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	r1, r2 := c.RWMutex("job/r"), d.RWMutex("job/r")
	if err := r1.TryRLock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r2.TryRLock(ctx); err != nil {
		t.Fatal(err)
	}
	// A waiter on job/07.
	wdone := make(chan error, 1)
	go func() { wdone <- d.Mutex("job/07").Lock(ctx) }()
	waitFor(t, "a waiter on job/07", func() bool {
		st, err := d.State(ctx, "job/07")
		return err == nil && st.QueueLen == 1
	})

	var got []client.State
	after := ""
	pages := 0
	for {
		page, err := d.List(ctx, "job/", after, 10)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		got = append(got, page.Locks...)
		if page.Next == "" {
			break
		}
		after = page.Next
		if pages > 10 {
			t.Fatal("List does not end")
		}
	}
	if len(got) != 26 || pages < 3 {
		t.Fatalf("listed %d locks in %d pages, want 26 in at least 3", len(got), pages)
	}
	for i, l := range got {
		if i > 0 && got[i-1].Key >= l.Key {
			t.Fatalf("not in key order: %q then %q", got[i-1].Key, l.Key)
		}
		if l.Key == "job/r" {
			if l.Kind != wire.KindRead || l.Readers != 2 {
				t.Fatalf("read lock listed as %+v", l)
			}
			continue
		}
		m := held[l.Key]
		if m == nil || l.Token != m.Token() || l.Holder != m.Owner() || l.Value != m.Value() || l.TTLLeft <= 0 || l.TTLLeft > time.Minute {
			t.Fatalf("listed %+v, want the hold of %v (token %d, value %q)", l, m.Owner(), m.Token(), m.Value())
		}
		if want := map[bool]int{true: 1, false: 0}[l.Key == "job/07"]; l.QueueLen != want {
			t.Fatalf("%s: %d waiters, want %d", l.Key, l.QueueLen, want)
		}
	}
	if page, err := d.List(ctx, "other/", "", 0); err != nil || len(page.Locks) != 1 || page.Next != "" {
		t.Fatalf("List other/: %+v, %v", page, err)
	}
	// Namespace "other" sees none of them.
	o, err := client.New(ctx, client.Config{Registry: tc.clientAddrs(), Namespace: "other", Secret: "x", Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if page, err := o.List(ctx, "", "", 0); err != nil || len(page.Locks) != 0 {
		t.Fatalf("List in another namespace: %+v, %v", page, err)
	}
	if _, err := d.List(ctx, "", "", wire.MaxListLimit+1); err == nil {
		t.Fatal("a limit above the maximum was accepted")
	}
	if err := held["job/07"].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-wdone; err != nil {
		t.Fatal(err)
	}
}
