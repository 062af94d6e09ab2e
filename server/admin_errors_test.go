package server

import (
	"errors"
	"fmt"
	"testing"

	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/server/adminhttp"
)

// TestAdminErrClasses checks that a wrapped sentinel keeps its text and
// both identities, and that an error of no class passes unchanged.
func TestAdminErrClasses(t *testing.T) {
	for _, c := range adminErrClasses {
		err := adminErr(fmt.Errorf("namespace %q: %w", "orders", c.err))
		if !errors.Is(err, c.class) || !errors.Is(err, c.err) {
			t.Errorf("%v: errors.Is class %v = %v, sentinel = %v", c.err, c.class, errors.Is(err, c.class), errors.Is(err, c.err))
		}
		if want := fmt.Sprintf("namespace %q: %v", "orders", c.err); err.Error() != want {
			t.Errorf("text %q, want %q", err, want)
		}
	}
	plain := errors.New("disk full")
	if adminErr(plain) != plain || adminErr(nil) != nil {
		t.Error("an error of no class was changed")
	}
	if errors.Is(adminErr(group.ErrNotMaster), adminhttp.ErrConflict) {
		t.Error("ErrNotMaster classed as a conflict")
	}
}
