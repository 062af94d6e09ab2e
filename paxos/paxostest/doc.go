// Package paxostest holds test support for packages built on package
// paxos: an in-process network of transports whose links can be cut
// (MemNetwork), and an in-memory CA for transports that run mutual TLS
// (PKI).
package paxostest
