package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/paxlock/paxlock/adminapi"
)

// memberUsage is the form of the member command.
const memberUsage = "want member list | member add ID peer=HOST:PORT client=HOST:PORT [client_tls=…] [gossip=…] [admin=…] | member remove ID"

// memberChangeTimeout bounds one add or remove: 15 groups changed one at a
// time, each within server.MemberChangeTimeout.
const memberChangeTimeout = 5 * time.Minute

// parseMemberArgs checks member's arguments and returns the method, path
// and body of its request.
func parseMemberArgs(args []string) (method, path string, body []byte, err error) {
	usage := fmt.Errorf("%w: %s", errUsage, memberUsage)
	if len(args) == 0 {
		return "", "", nil, usage
	}
	switch {
	case args[0] == "list" && len(args) == 1:
		return http.MethodGet, "/members", nil, nil
	case args[0] == "remove" && len(args) == 2:
		id, err := strconv.ParseUint(args[1], 10, 32)
		if err != nil || id == 0 {
			return "", "", nil, fmt.Errorf("%w: node id %q", errUsage, args[1])
		}
		return http.MethodDelete, "/members/" + args[1], nil, nil
	case args[0] == "add" && len(args) >= 3:
		id, err := strconv.ParseUint(args[1], 10, 32)
		if err != nil || id == 0 {
			return "", "", nil, fmt.Errorf("%w: node id %q", errUsage, args[1])
		}
		m := adminapi.Member{ID: uint32(id)}
		for _, kv := range args[2:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || v == "" {
				return "", "", nil, usage
			}
			switch k {
			case "peer":
				m.Peer = v
			case "client":
				m.Client = v
			case "client_tls":
				m.ClientTLS = v
			case "gossip":
				m.Gossip = v
			case "admin":
				m.Admin = v
			default:
				return "", "", nil, fmt.Errorf("%w: unknown address %q; %s", errUsage, k, memberUsage)
			}
		}
		if m.Peer == "" || m.Client == "" {
			return "", "", nil, fmt.Errorf("%w: member add needs peer= and client=", errUsage)
		}
		body, _ := json.Marshal(m)
		return http.MethodPost, "/members", body, nil
	}
	return "", "", nil, usage
}

// memberCmd lists, adds or removes cluster members through any node's
// admin endpoint (the node redirects a change to the master of the member
// list). A change that could not complete names the groups done and
// pending; running it again finishes it.
func memberCmd(ctx context.Context, p printer, ac *adminClient, args []string) error {
	method, path, body, err := parseMemberArgs(args)
	if err != nil {
		return err
	}
	code, b, err := ac.changeWithin(ctx, method, path, body, memberChangeTimeout)
	if err != nil {
		return fmt.Errorf("member %s: %w (run it again to finish it)", args[0], err)
	}
	if code != http.StatusOK {
		return fmt.Errorf("member %s: HTTP %d: %s", args[0], code, strings.TrimSpace(string(b)))
	}
	var rep adminapi.MembersReport
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("member %s: %w", args[0], err)
	}
	return p.emit(memberOutput(rep))
}

// memberOutput is member's output: the member list and each group's
// acceptors. JSON: adminapi.MembersReport.
type memberOutput adminapi.MembersReport

func (o memberOutput) MarshalJSON() ([]byte, error) { return json.Marshal(adminapi.MembersReport(o)) }

func (o memberOutput) table(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tPEER\tCLIENT\tADMIN")
	for _, m := range o.Members {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", m.ID, m.State, m.Peer, m.Client, m.Admin)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "GROUP\tMASTER\tACCEPTORS\tCHANGE")
	for _, g := range o.Groups {
		ids := make([]string, len(g.Members))
		for i, id := range g.Members {
			ids[i] = strconv.FormatUint(uint64(id), 10)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\n", g.Group, g.Master, strings.Join(ids, ","), g.Pending)
	}
	return tw.Flush()
}
