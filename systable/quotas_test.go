package systable

import (
	"errors"
	"testing"

	"github.com/paxlock/paxlock/client/wire"
)

// TestQuotaRecord: a quota encodes and decodes to itself; limits out of
// range, a burst without a rate and damaged records are refused.
func TestQuotaRecord(t *testing.T) {
	t.Parallel()
	for _, q := range []Quota{{Held: 1}, {Waiters: 7, Rate: 100, Burst: 20}, {Held: MaxQuota, Waiters: MaxQuota, Rate: MaxQuota, Burst: MaxQuota}} {
		got, err := DecodeQuota(EncodeQuota(q))
		if err != nil || got != q {
			t.Fatalf("%+v decoded as %+v, %v", q, got, err)
		}
	}
	for _, q := range []Quota{{Held: -1}, {Rate: MaxQuota + 1}, {Burst: 5}} {
		if err := q.Validate(); !errors.Is(err, wire.ErrInvalid) {
			t.Fatalf("%+v: %v, want ErrInvalid", q, err)
		}
	}
	good := EncodeQuota(Quota{Rate: 3})
	for _, b := range [][]byte{nil, {9, 0, 0, 0, 0}, good[:len(good)-1], append(append([]byte(nil), good...), 0), EncodeQuota(Quota{Burst: 2})} {
		if _, err := DecodeQuota(b); err == nil {
			t.Fatalf("damaged record %x decoded", b)
		}
	}
}

// TestQuotasObserver: the observer is told of a quota set and removed, a
// namespace's quota dropped, and a load that found or left quotas; not of
// a refused change, a drop of none, or a load of an empty table into an
// empty one.
func TestQuotasObserver(t *testing.T) {
	t.Parallel()
	var tab Quotas
	told := 0
	tab.SetObserver(func() { told++ })
	w := mapWriter{}
	rec := EncodeQuota(Quota{Held: 3})
	steps := []struct {
		do   func()
		tell bool
	}{
		{func() { tab.Apply("a", rec, true, w) }, true},
		{func() { tab.Apply("b", rec, false, w) }, false}, // no namespace
		{func() { tab.Apply("a", []byte{9}, true, w) }, false},
		{func() { tab.Drop("none", w) }, false},
		{func() { tab.BeginLoad()() }, true}, // had quotas
		{func() { tab.BeginLoad()() }, false},
		{func() { tab.Apply("a", rec, true, w) }, true},
		{func() { tab.Drop("a", w) }, true},
	}
	for i, s := range steps {
		before := told
		s.do()
		if got := told > before; got != s.tell {
			t.Errorf("step %d: told %v, want %v", i, got, s.tell)
		}
	}
}
