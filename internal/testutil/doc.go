// Package testutil holds the helpers the packages' tests share: waiting for
// a condition instead of sleeping, loggers that stay quiet (or speak only
// when a test fails), goroutine-leak options and a hand-made SCRAM
// handshake.
package testutil
