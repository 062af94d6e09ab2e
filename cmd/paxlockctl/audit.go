// This file is audit: the audit log of the changes made through the
// admin endpoints (GET /audit), read from any node's replica.

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/paxlock/paxlock/adminapi"
)

// auditPage is how many records one GET /audit asks for.
const auditPage = 1000

// auditFlags are audit's -since, -action and -in.
type auditFlags struct {
	since  uint64
	action string
	ns     string
}

func addAuditFlags(fs *flag.FlagSet, a *auditFlags) {
	fs.Uint64Var(&a.since, "since", 0, "audit: print the records after this sequence number (`SEQ`; 0: from the oldest kept)")
	fs.StringVar(&a.action, "action", "", "audit: print only the records of this action (force_unlock, namespace_put, quota_set, member_add, drain, ...)")
	fs.StringVar(&a.ns, "in", "", "audit: print only the records of this namespace; clients: only its sessions")
}

func runAudit(ctx context.Context, o *options, p printer, _ string, args []string) error {
	if err := wantArgs(args, 0, 0, "audit [-since SEQ] [-action A] [-in NAMESPACE]"); err != nil {
		return err
	}
	if o.limit <= 0 {
		return fmt.Errorf("%w: -limit %d: want at least 1", errUsage, o.limit)
	}
	ac, err := o.adminAPI()
	if err != nil {
		return err
	}
	return auditCmd(ctx, p, ac, o.audit, o.limit, o.timeout)
}

// auditCmd pages through GET /audit from the first node that answers,
// up to limit records, and prints them oldest first.
func auditCmd(ctx context.Context, p printer, ac *adminClient, f auditFlags, limit int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := auditOutput{Records: []adminapi.AuditRecord{}}
	since := f.since
	for len(out.Records) < limit {
		n := min(limit-len(out.Records), auditPage)
		q := url.Values{"since": {strconv.FormatUint(since, 10)}, "limit": {strconv.Itoa(n)}}
		if f.action != "" {
			q.Set("action", f.action)
		}
		if f.ns != "" {
			q.Set("namespace", f.ns)
		}
		var page adminapi.AuditLog
		if err := ac.getJSON(ctx, "/audit?"+q.Encode(), &page); err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		out.Node = page.Node
		out.Records = append(out.Records, page.Records...)
		if len(page.Records) < n || page.Last <= since {
			break
		}
		since = page.Last
	}
	return p.emit(out)
}

// auditOutput is audit's output: the records and the node that served
// them.
type auditOutput struct {
	Node    uint32                 `json:"node"`
	Records []adminapi.AuditRecord `json:"records"`
}

func (o auditOutput) table(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tNODE\tACTOR\tSOURCE\tACTION\tNAMESPACE\tTARGET\tOUTCOME")
	for _, r := range o.Records {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Seq, r.Time, r.Node, r.Actor, r.Source, r.Action, dash(r.Namespace), dash(r.Target), r.Outcome)
	}
	return tw.Flush()
}

// dash is s, or "-" for an empty column.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
