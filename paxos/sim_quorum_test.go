package paxos

// The simulator's side of quorum sync (Config.QuorumSync): what it counts
// of write-only writes, and the check that every vote on entries leaves
// only once the entries it vouches for are durable on its replica's disk,
// whatever the replica's role.

import (
	"slices"
	"testing"
)

// writeOnly records the entries of a write-only Ready of nd.
func (s *sim) writeOnly(nd *simNode, es []Entry) {
	s.writeOnlyReadys++
	if nd.wrote == nil {
		nd.wrote = make(map[uint64]Ballot)
	}
	for _, e := range es {
		nd.wrote[e.Instance] = e.Ballot
	}
}

// checkVouched fails the run when m, an after-sync message nd is about to
// send, vouches for an accepted entry that nd's disk does not hold (at its
// ballot or a later one): an Accepted for its instance, a Promise for each
// entry it reports. Instances at or below committed (the Committed of the
// Ready that made m) are chosen already and need no vote; those the disk
// applied or truncated are chosen too.
func (s *sim) checkVouched(nd *simNode, m Message, committed uint64) {
	if !vouchesForEntries(m) {
		return
	}
	durable := func(inst uint64, b Ballot) bool {
		if inst <= committed || inst <= uint64(len(nd.disk.sm)) || inst < nd.disk.logStart {
			return true
		}
		e, ok := nd.disk.log[inst]
		return ok && !e.Ballot.Less(b)
	}
	switch m.Type {
	case MsgAccepted:
		if !durable(m.Instance, m.Ballot) {
			s.fail("node %d votes for %d@%s before it is durable", nd.id, m.Instance, m.Ballot)
		}
		if b, ok := nd.wrote[m.Instance]; ok && b == m.Ballot {
			s.writeOnlyVotes++
		}
	case MsgPromise:
		for _, e := range m.Entries {
			if e.Instance > m.Committed && !durable(e.Instance, e.Ballot) {
				s.fail("node %d promises %s reporting %d@%s before it is durable", nd.id, m.Ballot, e.Instance, e.Ballot)
			}
		}
	}
}

// withQuorumSync turns Config.QuorumSync on in a simulation.
func withQuorumSync(c *Config) { c.QuorumSync = true }

// TestSimulationQuorumSync runs TestSimulation's seeds with quorum sync on:
// the same faults, crashes that lose unsynced writes (write-only entries
// among them) and membership changes, the same checks (I3 over durable
// votes, persist before send, C1–C17 after every event), and that the runs
// did what quorum sync adds: write-only writes, some of them lost in
// crashes, and votes on entries held write-only. Replay a seed with
//
//	go test ./paxos -run TestSimulationQuorumSync -seed N -simtrace
func TestSimulationQuorumSync(t *testing.T) {
	if *simSeed >= 0 {
		if _, err := runSimStats(t, *simSeed, withQuorumSync); err != nil {
			t.Fatal(err)
		}
		return
	}
	n := simSeedCount()
	var runs, writeOnly, lost, votes int
	for seed := range int64(n) {
		s, err := runSimStats(t, seed, withQuorumSync)
		if err != nil {
			t.Fatalf("%v\nreplay: go test ./paxos -run TestSimulationQuorumSync -seed %d -simtrace", err, seed)
		}
		runs++
		writeOnly += s.writeOnlyReadys
		lost += s.lostWriteOnly
		votes += s.writeOnlyVotes
	}
	t.Logf("%d runs: %d write-only Readys, %d write-only writes lost in crashes, %d votes on entries held write-only", runs, writeOnly, lost, votes)
	if writeOnly == 0 || lost == 0 || votes == 0 {
		t.Errorf("quorum sync was not exercised: %d write-only Readys, %d lost, %d votes on them", writeOnly, lost, votes)
	}
}

// settle starts a healthy simulation and runs it until a master serves
// and has applied one command on every replica; it returns the master.
func (s *sim) settle(t *testing.T) *simNode {
	t.Helper()
	for _, nd := range s.nodes {
		s.process(nd)
	}
	var m *simNode
	if !s.runUntil(400, func() bool { m = s.serving(); return m != nil }) {
		t.Fatalf("no master: %v", s.failed)
	}
	s.proposeOn(t, m, "settle")
	s.waitApplied(t, "settle", s.nodes...)
	return m
}

// serving returns the live replica that serves as master, or nil.
func (s *sim) serving() *simNode {
	for _, nd := range s.nodes {
		if nd.up && nd.core.Status().Serving {
			return nd
		}
	}
	return nil
}

// runUntil steps the simulation until cond holds, for at most ticks
// nominal ticks; it reports whether cond held.
func (s *sim) runUntil(ticks int64, cond func() bool) bool {
	end := s.now + ticks*unit
	for s.failed == nil && s.now < end {
		if cond() {
			return true
		}
		if !s.step() {
			break
		}
	}
	return s.failed == nil && cond()
}

// proposeOn proposes cmd on nd, which must accept it.
func (s *sim) proposeOn(t *testing.T, nd *simNode, cmd string) {
	t.Helper()
	s.nextCmd++
	tag := uint64(s.nextCmd)
	if err := nd.core.Propose([]byte(cmd), tag); err != nil {
		t.Fatalf("propose %s on %d: %v", cmd, nd.id, err)
	}
	nd.tags[tag] = cmd
	s.proposed[cmd] = true
	s.process(nd)
}

// waitApplied runs until every one of nds has applied cmd.
func (s *sim) waitApplied(t *testing.T, cmd string, nds ...*simNode) {
	t.Helper()
	ok := s.runUntil(400, func() bool {
		for _, nd := range nds {
			if !slices.ContainsFunc(nd.sm, func(k string) bool { return containsCmd(k, cmd) }) {
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("%s not applied on every one of the nodes (failure: %v)", cmd, s.failed)
	}
}

// roles returns the master's one voter and one non-voter (3 replicas).
func (s *sim) roles(t *testing.T, m *simNode) (voter, nonVoter *simNode) {
	t.Helper()
	if len(m.core.voters) != 1 {
		t.Fatalf("master %d has voters %v, want one", m.id, m.core.voters)
	}
	for _, nd := range s.nodes {
		switch {
		case nd == m:
		case nd.id == m.core.voters[0]:
			voter = nd
		default:
			nonVoter = nd
		}
	}
	return voter, nonVoter
}

// TestQuorumSyncVoterDies: the master's one voter dies; the next command
// reaches the non-voter write-only, and within a retransmission the
// master asks it to vote on what it holds, makes it the voter, and the
// command is chosen and applied.
func TestQuorumSyncVoterDies(t *testing.T) {
	s := newSim(t, 11, 3, withQuorumSync)
	m := s.settle(t)
	v, nv := s.roles(t, m)
	s.crash(v)
	wo, votes := s.writeOnlyReadys, s.writeOnlyVotes
	s.proposeOn(t, m, "after-voter-died")
	s.waitApplied(t, "after-voter-died", m, nv)
	if s.writeOnlyReadys == wo {
		t.Errorf("the non-voter wrote nothing write-only after the voter died")
	}
	if s.writeOnlyVotes == votes {
		t.Errorf("the non-voter never voted on an entry it held write-only")
	}
	if !slices.Equal(m.core.voters, []NodeID{nv.id}) {
		t.Errorf("voters %v after node %d died, want [%d]", m.core.voters, v.id, nv.id)
	}
	// The new voter gets the next command as a vote request at once.
	wo = s.writeOnlyReadys
	s.proposeOn(t, m, "next")
	s.waitApplied(t, "next", m, nv)
	if s.writeOnlyReadys != wo {
		t.Errorf("the replaced voter still gets Accepts write-only")
	}
	if s.failed != nil {
		t.Fatal(s.failed)
	}
}

// TestQuorumSyncNonVoterLosesUnsynced: the non-voter crashes and loses
// every write it had not synced (the commands it held write-only and
// applied); then the master crashes too, and the voter and the non-voter
// elect a master between them. The commands chosen before survive (the
// voter synced them before it voted), the non-voter relearns them, and a
// new command is chosen and applied on both; the simulator's checks (one
// value per instance, persist before send) hold throughout.
func TestQuorumSyncNonVoterLosesUnsynced(t *testing.T) {
	s := newSim(t, 12, 3, withQuorumSync)
	s.unsyncedApply = true // as the host: the non-voter's applies sync nothing
	m := s.settle(t)
	v, nv := s.roles(t, m)
	cmds := []string{"a", "b", "c"}
	for _, c := range cmds {
		s.proposeOn(t, m, c)
	}
	for _, c := range cmds {
		s.waitApplied(t, c, m, v, nv)
	}
	lost := s.lostWriteOnly
	nv.loseAll = true
	s.crash(nv)
	if s.lostWriteOnly == lost {
		t.Fatalf("the non-voter's crash lost no write-only write")
	}
	for _, e := range nv.disk.log {
		for _, c := range cmds {
			if containsCmd(valKey(e.Value), c) {
				t.Fatalf("the non-voter's disk kept %q at %d, which it never synced", c, e.Instance)
			}
		}
	}
	s.start(nv)
	s.process(nv)
	s.crash(m)
	var m2 *simNode
	if !s.runUntil(800, func() bool { m2 = s.serving(); return m2 != nil }) {
		t.Fatalf("no master after the old one crashed: %v", s.failed)
	}
	s.proposeOn(t, m2, "after")
	s.waitApplied(t, "after", v, nv)
	for _, c := range cmds {
		s.waitApplied(t, c, nv)
	}
	if s.failed != nil {
		t.Fatal(s.failed)
	}
}
