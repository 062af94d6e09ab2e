//go:build !invariants

package invariants

// Enabled is false: the binary was built without -tags invariants.
const Enabled = false
