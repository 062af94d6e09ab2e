// Package testutil holds the helpers the packages' tests share: waiting for
// a condition instead of sleeping, and a logger that stays quiet.
package testutil
