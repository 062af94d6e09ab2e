package scripttest

import (
	"testing"

	"github.com/cockroachdb/datadriven"
)

// Env is the state the commands of one script act on, and the output they
// write.
type Env interface {
	// Begin readies the env for command d, run by t; it fails d (with
	// d.Fatalf) when d cannot run now.
	Begin(t *testing.T, d *datadriven.TestData)
	// Output returns what the command since Begin wrote: the command's
	// output, compared with the script's.
	Output() string
}

// Handler carries out one command on env.
type Handler[E Env] func(env E, t *testing.T, d *datadriven.TestData)

// Registry maps a command's name to its handler.
type Registry[E Env] map[string]Handler[E]

// Handle carries out command d on env with its handler and returns its
// output. A command with no handler fails the test.
func (r Registry[E]) Handle(env E, t *testing.T, d *datadriven.TestData) string {
	env.Begin(t, d)
	h, ok := r[d.Cmd]
	if !ok {
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	h(env, t, d)
	return env.Output()
}

// Run runs every script under path (a file, or a directory walked in
// name order), each as a subtest on a fresh env from newEnv. Rewrite the
// scripts' expected output with the test's -rewrite flag.
func (r Registry[E]) Run(t *testing.T, path string, newEnv func(t *testing.T) E) {
	datadriven.Walk(t, path, func(t *testing.T, path string) {
		env := newEnv(t)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return r.Handle(env, t, d)
		})
	})
}
