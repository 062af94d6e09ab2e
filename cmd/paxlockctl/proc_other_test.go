//go:build !unix

package main

// leftoverRuns finds nothing where processes are not read from /proc.
func leftoverRuns() []leftover { return nil }

// killRuns has nothing to kill where leftoverRuns finds nothing.
func killRuns() []leftover { return nil }
