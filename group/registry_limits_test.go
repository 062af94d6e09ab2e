package group

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/systable"
)

// TestRegistryLimitsRefuseNewEntries: with the tables at each limit
// (clusters, namespaces, moves), a new entry of that table is refused
// ErrRegistryFull naming the limit, a change of an existing entry and a
// delete are not, and a deleted entry makes room; unset limits are the
// defaults.
func TestRegistryLimitsRefuseNewEntries(t *testing.T) {
	t.Parallel()
	kv := newMemKV()
	sm := NewStateMachine(1)
	svc := regService(sm)
	svc.cfg.Registry = RegistryLimits{MaxClusters: 2, MaxNamespaces: 3, MaxMoves: 1}
	v, err := scramauth.NewVerifier("secret")
	if err != nil {
		t.Fatal(err)
	}
	var r regCmds
	cmds := [][]byte{r.cluster("a", "a:1"), r.cluster("b", "b:1")}
	for i := range 3 {
		cmds = append(cmds, r.ns(fmt.Sprintf("ns%d", i), "a", &v))
	}
	cmds = append(cmds, r.move(adminapi.RegistryMove{Namespace: "ns0", ID: 1, From: "a", To: "b", State: adminapi.MovePrepare, Token: 1}))
	want := make([]regOutcome, len(cmds))
	for i := range want {
		want[i] = regApplied
	}
	applyReg(t, sm, kv, 1, cmds, want)

	cluster := func(name string) *command {
		return &command{op: opRegCluster, key: name, data: systable.EncodeRegistryCluster(adminapi.RegistryCluster{Name: name, Client: []string{"x:1"}})}
	}
	ns := func(name string) *command {
		return &command{op: opRegNamespace, key: name, data: systable.EncodeRegistryNamespace("a", &v)}
	}
	move := func(name string) *command {
		return &command{op: opRegMove, key: name, token: 1, data: systable.EncodeRegistryMove(adminapi.RegistryMove{Namespace: name, ID: 2, From: "a", To: "b", State: adminapi.MovePrepare})}
	}
	for _, c := range []struct {
		what string
		cmd  *command
		full bool
	}{
		{"a third cluster", cluster("c"), true},
		{"an existing cluster changed", cluster("a"), false},
		{"a cluster deleted", &command{op: opRegCluster, key: "a"}, false},
		{"a fourth namespace", ns("ns3"), true},
		{"an existing namespace changed", ns("ns1"), false},
		{"a second move", move("ns1"), true},
		{"the existing move's record", move("ns0"), false},
	} {
		err := svc.registryRoom(c.cmd)
		if got := errors.Is(err, ErrRegistryFull); got != c.full {
			t.Errorf("%s: %v, want full %v", c.what, err, c.full)
		}
	}
	if err := svc.registryRoom(cluster("c")); err == nil || !strings.Contains(err.Error(), "registry_max_clusters") {
		t.Errorf("the refusal does not name the limit: %v", err)
	}
	applyReg(t, sm, kv, 100, [][]byte{r.dropNS("ns2")}, []regOutcome{regApplied})
	if err := svc.registryRoom(ns("ns3")); err != nil {
		t.Errorf("a namespace after one was deleted: %v", err)
	}

	svc.cfg.Registry = RegistryLimits{}
	if err := svc.registryRoom(cluster("c")); err != nil {
		t.Errorf("default limit of %d clusters refused a third: %v", DefaultMaxRegistryClusters, err)
	}
}
