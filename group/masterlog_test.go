package group

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
)

// TestMasterChangesLogged walks one replica (node 1) through an election,
// serving, a lease lapse, a mastership transfer to the preferred node, a
// transfer back and a step-down to a rival, and checks each is logged at info level
// with the group, the ballot and the reason.
func TestMasterChangesLogged(t *testing.T) {
	t.Parallel()
	var buf testutil.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	g := &Group{svc: &Service{cfg: Config{Logger: log}}, id: 3, self: 1}
	b := func(r uint64, n paxos.NodeID) paxos.Ballot { return paxos.Ballot{Round: r, Node: n} }
	steps := []struct {
		to   paxos.SoftState
		pref paxos.NodeID
		want []string // substrings of the log; nil: nothing at info level
	}{
		{paxos.SoftState{Master: 1, Ballot: b(1, 1)}, 2, []string{`msg="group master elected"`, "group=3", "ballot=1.1", `reason="elected: no master was known"`}},
		{paxos.SoftState{Master: 1, Ballot: b(1, 1), Serving: true}, 2, []string{`msg="group master serving"`, "group=3"}},
		{paxos.SoftState{Master: 1, Ballot: b(1, 1)}, 2, []string{`msg="group master stopped serving"`, "lease"}},
		{paxos.SoftState{Master: 2, Ballot: b(2, 2)}, 2, []string{`msg="group master stepped down"`, "new_master=2", "new_ballot=2.2", "hand-off: gave the group to its preferred master, node 2"}},
		{paxos.SoftState{Master: 2, Ballot: b(2, 2)}, 1, nil},
		{paxos.SoftState{Master: 1, Ballot: b(3, 1)}, 1, []string{`msg="group master elected"`, "ballot=3.1", "previous=2", "hand-off: took the group from node 2"}},
		{paxos.SoftState{Master: 3, Ballot: b(4, 3)}, 1, []string{`msg="group master stepped down"`, "superseded by node 3"}},
		{paxos.SoftState{Master: 0}, 1, nil},
		{paxos.SoftState{Master: 1, Ballot: b(5, 1)}, 1, []string{`msg="group master elected"`, "no master was known"}},
		{paxos.SoftState{Master: 0}, 1, []string{`msg="group master stepped down"`, "no successor known yet"}},
	}
	for i, st := range steps {
		g.preferred.Store(uint32(st.pref))
		g.softMu.Lock()
		prev := g.soft
		g.soft = st.to
		g.softMu.Unlock()
		g.logMaster(prev, st.to)
		got := buf.Take()
		if st.want == nil {
			if got != "" {
				t.Errorf("step %d (%+v): logged %q, want nothing at info level", i, st.to, got)
			}
			continue
		}
		for _, w := range st.want {
			if !strings.Contains(got, w) {
				t.Errorf("step %d (%+v): log %q lacks %q", i, st.to, got, w)
			}
		}
	}
}
