package scripttest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// counter is an Env for the package's own test: a number the commands
// change and print.
type counter struct {
	n   int
	out strings.Builder
}

func (c *counter) Begin(*testing.T, *datadriven.TestData) { c.out.Reset() }

func (c *counter) Output() string { return c.out.String() }

var counterCommands = Registry[*counter]{
	"add": func(c *counter, t *testing.T, d *datadriven.TestData) {
		Known(t, d, "times")
		times := 1
		d.MaybeScanArgs(t, "times", &times)
		c.n += times * PosInt(t, d, 0)
		fmt.Fprintf(&c.out, "n=%d\n", c.n)
	},
	"wait": func(c *counter, t *testing.T, d *datadriven.TestData) {
		step := PosDuration(t, d, 0)
		MaybeDuration(t, d, "extra", &step)
		fmt.Fprintf(&c.out, "%v %v\n", step, Ints(t, d, "of"))
	},
	"args": func(c *counter, t *testing.T, d *datadriven.TestData) {
		fmt.Fprintf(&c.out, "%v %v %q\n", HasPos(d, 0), HasPos(d, 1), Pos(t, d, 0))
	},
}

func TestRegistry(t *testing.T) {
	c := &counter{}
	datadriven.RunTestFromString(t, `
add 2
----
n=2

add 3 times=2
----
n=8

wait 1s of=(1,2,3)
----
1s [1 2 3]

wait 1s extra=250ms
----
250ms []

args x k=v
----
true false "x"
`, func(t *testing.T, d *datadriven.TestData) string {
		return counterCommands.Handle(c, t, d)
	})
}
