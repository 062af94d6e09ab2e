// Package recipe holds the tests and examples of package client/recipe
// against real nodes (package paxlocktest), kept in the root module so
// that the client module requires only what the client needs (see
// package clienttests).
package recipe
