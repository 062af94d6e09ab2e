package systable

import (
	"errors"
	"strings"
	"testing"
)

func auditCmd(keep int, action, ns string) []byte {
	return EncodeAuditCommand(keep, AuditRecord{TimeMs: 1700000000000, Node: 2, Actor: "admin token", Source: "10.0.0.1:5000", Action: action, Namespace: ns, Target: "k", Outcome: "ok"})
}

// TestAuditApplyBound: records get consecutive sequence numbers and the
// instance they were chosen at; past the bound the oldest go, from the
// table and from the keyspace alike; filters select by action and
// namespace, since and limit page.
func TestAuditApplyBound(t *testing.T) {
	t.Parallel()
	var tab Audit
	w := mapWriter{}
	for i := range 12 {
		act := "quota_set"
		if i%3 == 0 {
			act = "force_unlock"
		}
		if o := tab.Apply(uint64(100+i), auditCmd(5, act, "ns"), w); o != AuditApplied {
			t.Fatalf("apply %d: %v", i, o)
		}
	}
	if o := tab.Apply(200, []byte{1, 9}, w); o != AuditBadRecord {
		t.Fatalf("damaged command: %v", o)
	}
	if tab.Len() != 5 || len(w) != 5 || tab.Last() != 12 {
		t.Fatalf("len %d, keys %d, last %d; want 5, 5, 12", tab.Len(), len(w), tab.Last())
	}
	all := tab.Read(AuditFilter{})
	for i, r := range all {
		if r.Seq != uint64(8+i) || r.Instance != uint64(107+i) {
			t.Fatalf("record %d: seq %d instance %d", i, r.Seq, r.Instance)
		}
		if _, ok := w[string(AuditKey(r.Seq))]; !ok {
			t.Fatalf("record %d not in the keyspace", r.Seq)
		}
	}
	if got := tab.Read(AuditFilter{Action: "force_unlock"}); len(got) != 1 || got[0].Seq != 10 {
		t.Fatalf("force_unlock records: %+v", got)
	}
	if got := tab.Read(AuditFilter{Since: 9, Limit: 2}); len(got) != 2 || got[0].Seq != 10 {
		t.Fatalf("since 9 limit 2: %+v", got)
	}
	if got := tab.Read(AuditFilter{Namespace: "other"}); len(got) != 0 {
		t.Fatalf("namespace other: %+v", got)
	}
}

// TestAuditLoadRoundTrip: a load of what the applies wrote (in any
// order) gives the same records, and the next apply continues their
// sequence; CheckPair accepts every pair written.
func TestAuditLoadRoundTrip(t *testing.T) {
	t.Parallel()
	var tab Audit
	w := mapWriter{}
	for i := range 4 {
		tab.Apply(uint64(i+1), auditCmd(3, "namespace_put", "n"), w)
	}
	var got Audit
	end := got.BeginLoad()
	for k, v := range w { // map order: not the keyspace's
		if !got.Claims([]byte(k)) {
			t.Fatalf("key %x not claimed", k)
		}
		if err := got.CheckPair([]byte(k), v); err != nil {
			t.Fatal(err)
		}
		if err := got.LoadPair([]byte(k), v); err != nil {
			t.Fatal(err)
		}
	}
	end()
	a, b := tab.Read(AuditFilter{}), got.Read(AuditFilter{})
	if len(a) != 3 || len(a) != len(b) {
		t.Fatalf("loaded %d records, want %d", len(b), len(a))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("record %d: %+v, loaded %+v", i, a[i], b[i])
		}
	}
	got.Apply(9, auditCmd(3, "drain", ""), mapWriter{})
	if got.Last() != 5 {
		t.Fatalf("after load and apply, last %d, want 5", got.Last())
	}
	if err := got.LoadPair([]byte{auditPrefix, 1}, nil); !errors.Is(err, ErrBadAuditRecord) {
		t.Fatalf("short key: %v", err)
	}
}

// TestAuditRecordCodec: a record and a command decode to themselves;
// long texts are cut to MaxAuditText; damaged ones are refused.
func TestAuditRecordCodec(t *testing.T) {
	t.Parallel()
	r := AuditRecord{Instance: 7, TimeMs: 12345, Node: 3, Actor: "CN=ops", Source: "[::1]:1", Action: "member_remove", Target: "4", Outcome: "ok"}
	got, err := DecodeAuditRecord(EncodeAuditRecord(r))
	if err != nil || got != r {
		t.Fatalf("%+v decoded as %+v, %v", r, got, err)
	}
	long := r
	long.Target = strings.Repeat("x", MaxAuditText+10)
	keep, got, err := DecodeAuditCommand(EncodeAuditCommand(0, long))
	if err != nil || keep != 1 || len(got.Target) != MaxAuditText {
		t.Fatalf("long target: keep %d, len %d, %v", keep, len(got.Target), err)
	}
	good := EncodeAuditRecord(r)
	for _, b := range [][]byte{nil, {2}, good[:len(good)-1], append(append([]byte(nil), good...), 0)} {
		if _, err := DecodeAuditRecord(b); !errors.Is(err, ErrBadAuditRecord) {
			t.Fatalf("damaged record %x: %v", b, err)
		}
	}
	if _, _, err := DecodeAuditCommand(append([]byte{0}, good...)); !errors.Is(err, ErrBadAuditRecord) {
		t.Fatalf("keep 0: %v", err)
	}
}

// FuzzAuditCommand: any input either fails to decode or decodes to a
// command whose re-encoding decodes to the same thing; nothing panics.
func FuzzAuditCommand(f *testing.F) {
	f.Add(auditCmd(10, "force_unlock", "ns"))
	f.Add([]byte{1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		keep, r, err := DecodeAuditCommand(b)
		if err != nil {
			return
		}
		k2, r2, err := DecodeAuditCommand(EncodeAuditCommand(keep, r))
		if err != nil || k2 != keep || r2 != r {
			t.Fatalf("%x: re-encoded %d %+v, %v; want %d %+v", b, k2, r2, err, keep, r)
		}
		if _, err := DecodeAuditRecord(EncodeAuditRecord(r)); err != nil {
			t.Fatal(err)
		}
	})
}
