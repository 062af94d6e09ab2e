package host

import "github.com/paxlock/paxlock/paxos"

// publishRefusals copies the core's refusal counts where Refusals reads
// them, when they changed since the last copy: a round that refused
// nothing costs one comparison. Only the host's loop calls it.
func (g *Replica) publishRefusals() {
	n := g.core.Refused()
	if n == g.refusedSeen {
		return
	}
	g.refusedSeen = n
	r := g.core.Refusals()
	for i, v := range r {
		if paxos.RefuseReason(i) != paxos.RefusedSnapshot { // counted here, never by the core
			g.refusals[i].Store(v)
		}
	}
}

// Refusals returns what this replica refused from its peers as no honest
// replica sends it, by reason (paxos.RefuseReason): the core's refusals
// as of the host loop's latest round, and the snapshot streams nobody
// asked for (paxos.RefusedSnapshot). Safe to call from any goroutine.
func (g *Replica) Refusals() paxos.Refusals {
	var r paxos.Refusals
	for i := range r {
		r[i] = g.refusals[i].Load()
	}
	return r
}
