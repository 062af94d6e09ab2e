package adminhttp

import (
	"errors"
	"testing"

	"github.com/paxlock/paxlock/client/wire"
)

// FuzzRegistryCursor: a GET /registry cursor (outside input) is refused
// wire.ErrInvalid or parsed to one that prints back as it was given.
func FuzzRegistryCursor(f *testing.F) {
	for _, s := range []string{"", "c:east", "n:app", "m:x", "n:", "z:a", "n:a:b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseRegistryCursor(s)
		if err != nil {
			if !errors.Is(err, wire.ErrInvalid) {
				t.Fatalf("%q: %v does not wrap ErrInvalid", s, err)
			}
			return
		}
		if s != "" && c.String() != s {
			t.Fatalf("%q parsed to %q", s, c.String())
		}
	})
}
