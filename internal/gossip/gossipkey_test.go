package gossip

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/testutil"
)

// startKeyed starts a member whose gossip is encrypted with key, also
// accepting old.
func startKeyed(t *testing.T, id uint32, label string, key []byte, old ...[]byte) *Membership {
	t.Helper()
	m, err := NewMembership(MembershipConfig{NodeID: id, Bind: "127.0.0.1:0", Label: label, SecretKey: key, OldSecretKeys: old,
		Logger: testutil.FailureLogger(t).With("member", id), Timing: FastTiming()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop() })
	return m
}

// TestMembershipGossipKey: members with different keys (or one without
// a key) never join; members whose keyrings share the keys (a rotation in
// progress: one already sends with the new key, the other still with the
// old) do.
func TestMembershipGossipKey(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	label := testLabel()
	a := startKeyed(t, 1, label, k1)
	b := startKeyed(t, 2, label, k2)
	c := startKeyed(t, 3, label, nil)
	for _, m := range []*Membership{b, c} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := m.Join(ctx, []string{a.GossipAddr()})
		cancel()
		if !errors.Is(err, ErrJoin) {
			t.Fatalf("node %d joined node 1 with another key: %v", m.cfg.NodeID, err)
		}
	}
	if got := LiveIDs(a.Members()); !slices.Equal(got, []uint32{1}) {
		t.Fatalf("node 1 sees %v live, want only itself", got)
	}

	label = testLabel()
	x := startKeyed(t, 4, label, k1, k2) // accepts the new key, still sends the old
	y := startKeyed(t, 5, label, k2, k1) // switched to the new key
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := y.Join(ctx, []string{x.GossipAddr()}); err != nil {
		t.Fatalf("rotation: join: %v", err)
	}
	for _, m := range []*Membership{x, y} {
		testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
			return slices.Equal(LiveIDs(m.Members()), []uint32{4, 5}), describe(m)
		}, "both members live on both")
	}
}
