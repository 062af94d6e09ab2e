package host

import (
	"time"

	"github.com/paxlock/paxlock/paxos"
)

// refusalLogEvery is the least time between two log lines of one group
// about refused peer messages: a peer that floods them costs a line per
// group now and then, and the counts say the rest.
const refusalLogEvery = 10 * time.Second

// publishRefusals copies the core's refusal counts where Refusals reads
// them, when they changed since the last copy: a round that refused
// nothing costs one comparison. It logs a warning naming the peer, at
// most once per refusalLogEvery. Only the host's loop calls it.
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
	g.logRefusal(g.core.LastRefused())
}

// logRefusal warns that peer sent what no honest node sends, unless the
// group did so less than refusalLogEvery ago (the host's loop only).
func (g *Replica) logRefusal(peer paxos.NodeID) {
	now := g.host.clock.Now()
	if !g.refusalLogged.IsZero() && now.Sub(g.refusalLogged) < refusalLogEvery {
		return
	}
	g.refusalLogged = now
	r := g.Refusals()
	attrs := []any{"group", g.id, "peer", peer}
	for i, v := range r {
		if v > 0 {
			attrs = append(attrs, paxos.RefuseReason(i).String(), v)
		}
	}
	g.log.Warn("paxos: refused peer messages no honest node sends (a buggy or compromised node?)", attrs...)
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
