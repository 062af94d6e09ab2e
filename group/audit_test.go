package group

import (
	"testing"

	"github.com/paxlock/paxlock/systable"
)

// TestAuditApplyAndLoad: two replicas applying the same audit commands
// (two in one instance) hold the same records, numbered in apply order
// with the instance each was chosen at, trimmed to the commands' bound;
// a replica loaded from the keyspace they wrote (a checkpoint) holds the
// same records and numbers the next one after them.
func TestAuditApplyAndLoad(t *testing.T) {
	t.Parallel()
	cmd := func(target string) []byte {
		return appendCommand(nil, &command{op: opAudit, data: systable.EncodeAuditCommand(3, AuditRecord{Action: "force_unlock", Namespace: "ns", Target: target, Actor: "admin token", Outcome: "ok"})})
	}
	a, b := NewStateMachine(1), NewStateMachine(1)
	kvA, kvB := newMemKV(), newMemKV()
	batches := [][][]byte{{cmd("k1")}, {cmd("k2"), cmd("k3")}, {cmd("k4")}}
	for i, batch := range batches {
		for _, sm := range []*StateMachine{a, b} {
			kv := kvA
			if sm == b {
				kv = kvB
			}
			res := make([]any, len(batch))
			sm.Apply(uint64(10+i), batch, kv, res)
			for _, r := range res {
				if r != systable.AuditApplied {
					t.Fatalf("instance %d: %v", 10+i, r)
				}
			}
		}
	}
	ra, rb := a.audit.Read(AuditFilter{}), b.audit.Read(AuditFilter{})
	if len(ra) != 3 || len(rb) != 3 {
		t.Fatalf("kept %d and %d records, want 3", len(ra), len(rb))
	}
	wantInst := []uint64{11, 11, 12}
	for i := range ra {
		if ra[i] != rb[i] || ra[i].Seq != uint64(i+2) || ra[i].Instance != wantInst[i] {
			t.Fatalf("record %d: %+v and %+v", i, ra[i], rb[i])
		}
	}
	c := NewStateMachine(1)
	if err := c.Load(kvA.clone(), 12); err != nil {
		t.Fatal(err)
	}
	rc := c.audit.Read(AuditFilter{})
	if len(rc) != 3 || rc[0] != ra[0] || rc[2] != ra[2] {
		t.Fatalf("loaded %+v, want %+v", rc, ra)
	}
	res := make([]any, 1)
	c.Apply(13, [][]byte{cmd("k5")}, kvA, res)
	if c.audit.Last() != 5 {
		t.Fatalf("after the load, the next record is %d, want 5", c.audit.Last())
	}
	if err := checkPair(systable.AuditKey(5), kvA.m[string(systable.AuditKey(5))]); err != nil {
		t.Fatalf("a backup's check of an audit record: %v", err)
	}
}
