package systable

import (
	"errors"
	"testing"
)

// fakeLocks is a lock table for move steps: whether it holds keys of a
// namespace, and what was dropped and imported.
type fakeLocks struct {
	holds    bool
	dropped  []string
	imported int
	bad      bool // Import refuses the batch
}

func (f *fakeLocks) Holds(string) bool { return f.holds }
func (f *fakeLocks) Drop(ns string)    { f.dropped = append(f.dropped, ns) }
func (f *fakeLocks) Import(string, []byte) error {
	if f.bad {
		return errors.New("bad batch")
	}
	f.imported++
	return nil
}

// TestMovesSteps walks a target and a source through a move: the steps'
// outcomes, the gates, the fence, the drop and the imports the lock table
// is asked for, and a checkpoint's reload giving the same records.
func TestMovesSteps(t *testing.T) {
	t.Parallel()
	var dst, src Moves
	dl, sl := &fakeLocks{}, &fakeLocks{}
	d := func(rest string) []byte { return EncodeMoveData("m1", []byte(rest)) }
	batch := string(EncodeImportBatch(1, 7, nil))
	steps := []struct {
		t     *Moves
		locks *fakeLocks
		step  MoveStep
		token uint64
		data  []byte
		want  MoveOutcome
	}{
		{&dst, dl, StepIncoming, 5, d(""), MoveApplied},
		{&dst, dl, StepImport, 5, d(batch), MoveApplied},
		{&dst, dl, StepImport, 5, d(batch), MoveApplied},  // applied already: not imported again
		{&dst, dl, StepImport, 4, d(batch), MoveConflict}, // below the fence
		{&src, sl, StepFreeze, 5, d(""), MoveApplied},
		{&src, sl, StepOwn, 5, d(""), MoveConflict},
		{&src, sl, StepDrop, 5, d("t:1"), MoveApplied},
		{&dst, dl, StepOwn, 6, d(""), MoveApplied},
		{&dst, dl, StepFreeze, 6, []byte{0x80}, MoveMalformed},
	}
	for i, s := range steps {
		if got := s.t.Apply(s.step, "ns", s.token, s.data, s.locks); got != s.want {
			t.Errorf("step %d: %s, want %s", i, got, s.want)
		}
	}
	if dl.imported != 1 || len(sl.dropped) != 1 || len(dl.dropped) != 0 {
		t.Fatalf("imported %d, dropped %v/%v", dl.imported, sl.dropped, dl.dropped)
	}
	if g, ok := src.Gate("ns"); !ok || !g.Moved || g.MovedTo != "t:1" {
		t.Fatalf("source's gate %+v %v, want MOVED to t:1", g, ok)
	}
	if _, ok := dst.Gate("ns"); ok || dst.Gated() {
		t.Fatal("an owned namespace is gated")
	}
	if st, id, _, _ := dst.Info("ns"); st != MoveOwned || id != "m1" {
		t.Fatalf("target's state %s, id %q", st, id)
	}
	for _, m := range []*Moves{&dst, &src} {
		w := mapWriter{}
		m.Checkpoint(w)
		var re Moves
		for k, v := range w {
			if !IsMoveKey([]byte(k)) || CheckMovePair([]byte(k), v) != nil {
				t.Fatalf("key %q: not a good move record", k)
			}
			if err := re.LoadPair([]byte(k), v); err != nil {
				t.Fatal(err)
			}
		}
		re.Publish()
		if !re.Equal(m) {
			t.Fatal("the reload differs")
		}
		g1, ok1 := re.Gate("ns")
		g2, ok2 := m.Gate("ns")
		if g1 != g2 || ok1 != ok2 {
			t.Fatalf("reloaded gate %+v %v, live %+v %v", g1, ok1, g2, ok2)
		}
	}
	rec := encodeMoveRec(nil, &moveRec{st: MoveDropped, id: "m", movedTo: "x", batches: map[batchID]struct{}{{1, 2}: {}}, fence: 3})
	for i := range rec {
		if _, err := decodeMoveRec(rec[:i]); err == nil {
			t.Fatalf("a record cut at %d decoded", i)
		}
	}
}
