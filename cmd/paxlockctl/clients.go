// This file is clients: the client sessions the nodes serve, through the
// admin endpoints (GET /clients, a page at a time).

package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/wire"
)

// clientsOutput is clients' output: the sessions, in node order and
// longest connected first, and the nodes that did not answer.
type clientsOutput struct {
	Clients []adminapi.ClientSession `json:"clients"`
	Missing []uint32                 `json:"missing,omitempty"`
	now     time.Time
}

func (c clientsOutput) table(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tCLIENT\tNAMESPACE\tFROM\tTLS\tRELAY\tCONNECTED FOR\tIN-FLIGHT\tWAITS\tWATCHES")
	for _, s := range c.Clients {
		tlsCol, relay := "no", "-"
		if s.TLS {
			tlsCol = "yes"
		}
		if s.Relay != 0 {
			relay = "node " + strconv.FormatUint(uint64(s.Relay), 10)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", s.Node, s.Client, s.Namespace, s.Remote, tlsCol, relay,
			c.now.Sub(s.Connected).Truncate(time.Second), s.InFlight, s.Waits, s.Watches+s.PrefixWatches)
	}
	if len(c.Missing) > 0 {
		fmt.Fprintf(tw, "not answering: nodes %v\n", c.Missing)
	}
	return tw.Flush()
}

// runClients is clients [NODE] [-in NAMESPACE]: pages through GET
// /clients until -limit sessions or the last page.
func runClients(ctx context.Context, o *options, p printer, _ string, args []string) error {
	if err := wantArgs(args, 0, 1, "clients [NODE] [-in NAMESPACE]"); err != nil {
		return err
	}
	if o.limit <= 0 {
		return fmt.Errorf("%w: -limit %d: want at least 1", errUsage, o.limit)
	}
	q := url.Values{}
	if len(args) == 1 {
		id, err := strconv.ParseUint(args[0], 10, 32)
		if err != nil || id == 0 {
			return fmt.Errorf("%w: clients: %q is not a node id", errUsage, args[0])
		}
		q.Set("node", args[0])
	}
	if o.audit.ns != "" {
		if err := wire.ValidateNamespace(o.audit.ns); err != nil {
			return fmt.Errorf("%w: -in: %w", errUsage, err)
		}
		q.Set("namespace", o.audit.ns)
	}
	ac, err := o.adminAPI()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	out := clientsOutput{Clients: []adminapi.ClientSession{}, now: time.Now()}
	missing := map[uint32]bool{}
	for len(out.Clients) < o.limit {
		q.Set("limit", strconv.Itoa(min(o.limit-len(out.Clients), adminapi.MaxClientsLimit)))
		var page adminapi.ClientPage
		if err := ac.getJSON(ctx, "/clients?"+q.Encode(), &page); err != nil {
			return err
		}
		out.Clients = append(out.Clients, page.Clients...)
		for _, id := range page.Missing {
			if !missing[id] {
				missing[id] = true
				out.Missing = append(out.Missing, id)
			}
		}
		if page.Next == "" || len(page.Clients) == 0 {
			break
		}
		q.Set("after", page.Next)
	}
	return p.emit(out)
}

// clientsNote is what clients' help says of the counts.
var clientsNote = strings.Join([]string{
	"IN-FLIGHT counts the session's requests the node has not answered yet;",
	"WAITS and WATCHES its blocked acquires and watches (prefix watches included) at the groups that node masters:",
	"those at another master are counted there, under the session of the node that relays them (RELAY).",
}, " ")
