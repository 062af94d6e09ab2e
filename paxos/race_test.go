//go:build race

package paxos

const raceEnabled = true
