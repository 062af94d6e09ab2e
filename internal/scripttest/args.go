package scripttest

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// HasPos reports whether d's argument i (from 0) is positional: a bare
// word, not key=value.
func HasPos(d *datadriven.TestData, i int) bool {
	return i < len(d.CmdArgs) && d.CmdArgs[i].Vals == nil
}

// Pos returns d's positional argument i (from 0); d fails if it has none
// there.
func Pos(t *testing.T, d *datadriven.TestData, i int) string {
	if !HasPos(d, i) {
		d.Fatalf(t, "%s: argument %d missing", d.Cmd, i+1)
	}
	return d.CmdArgs[i].Key
}

// PosInt returns d's positional argument i (from 0) as an integer.
func PosInt(t *testing.T, d *datadriven.TestData, i int) int {
	n, err := strconv.Atoi(Pos(t, d, i))
	if err != nil {
		d.Fatalf(t, "%s: argument %d: %v", d.Cmd, i+1, err)
	}
	return n
}

// PosDuration returns d's positional argument i (from 0) as a duration
// (time.ParseDuration: "1s", "500ms").
func PosDuration(t *testing.T, d *datadriven.TestData, i int) time.Duration {
	v, err := time.ParseDuration(Pos(t, d, i))
	if err != nil {
		d.Fatalf(t, "%s: argument %d: %v", d.Cmd, i+1, err)
	}
	return v
}

// MaybeDuration sets *dest to the duration of d's argument key=value
// (time.ParseDuration: "1s", "500ms") and reports whether d has it; dest
// is left alone otherwise.
func MaybeDuration(t *testing.T, d *datadriven.TestData, key string, dest *time.Duration) bool {
	var s string
	if !d.MaybeScanArgs(t, key, &s) {
		return false
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.Fatalf(t, "%s: %s=%s: %v", d.Cmd, key, s, err)
	}
	*dest = v
	return true
}

// Ints returns the values of d's argument key (key=v or key=(v1,v2,...))
// as integers, nil if d has no such argument.
func Ints(t *testing.T, d *datadriven.TestData, key string) []int {
	a, ok := d.Arg(key)
	if !ok {
		return nil
	}
	out := make([]int, 0, len(a.Vals))
	for _, v := range a.Vals {
		n, err := strconv.Atoi(v)
		if err != nil {
			d.Fatalf(t, "%s=%s: %v", key, v, err)
		}
		out = append(out, n)
	}
	return out
}

// Known fails d if it has a key=value argument whose key is not one of
// keys; positional arguments are not checked.
func Known(t *testing.T, d *datadriven.TestData, keys ...string) {
	for _, a := range d.CmdArgs {
		if a.Vals != nil && !slices.Contains(keys, a.Key) {
			d.Fatalf(t, "%s: unknown argument %q", d.Cmd, a.Key)
		}
	}
}
