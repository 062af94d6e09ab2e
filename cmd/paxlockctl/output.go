package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/internal/buildinfo"
)

// The record types below are paxlockctl's -o json output. Their JSON field
// names are a stable interface for scripts: fields may be added, never
// renamed or removed. docs/operations.md lists them.

// printer writes a command's records as tables or as JSON (one object per
// line, so that lock and watch stream JSON Lines).
type printer struct {
	w    io.Writer
	json bool
}

// tabler is a record that renders itself for -o table.
type tabler interface {
	table(w io.Writer) error
}

func (p printer) emit(v tabler) error {
	if p.json {
		return json.NewEncoder(p.w).Encode(v)
	}
	return v.table(p.w)
}

// versionOutput is version's output: the build information's fields.
type versionOutput struct {
	buildinfo.Info
	line string
}

func (o versionOutput) table(w io.Writer) error {
	_, err := fmt.Fprintln(w, o.line)
	return err
}

// statusOutput is status's output.
type statusOutput struct {
	Nodes  []statusNode  `json:"nodes"`
	Groups []statusGroup `json:"groups"`
}

// statusNode is one admin address's report.
type statusNode struct {
	// Admin is the admin address asked.
	Admin string `json:"admin"`
	// Node, Client, Conns and ViewVersion are from its /status (zero when
	// it did not answer).
	Node        uint32 `json:"node"`
	Client      string `json:"client"`
	Conns       int64  `json:"conns"`
	ViewVersion uint64 `json:"view_version"`
	// Health is up, down (no answer) or storage_failed.
	Health string `json:"health"`
	// Masters is how many groups the node serves as master.
	Masters int `json:"masters"`
	// Error says why the node is down or its storage failed.
	Error string `json:"error,omitempty"`
	// Version is the build the node runs, from its /status.
	Version string `json:"version,omitempty"`
}

// statusGroup is one group as the answering nodes see it.
type statusGroup struct {
	Group int `json:"group"`
	// Master is the node serving the group, 0 for none.
	Master  uint32 `json:"master"`
	Epoch   uint64 `json:"epoch"`
	Applied uint64 `json:"applied"`
	// Locks is the number of held locks, from the master.
	Locks int64 `json:"locks"`
}

func (s statusOutput) table(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tCLIENT\tADMIN\tHEALTH\tMASTERS\tCONNS\tVERSION")
	for _, n := range s.Nodes {
		switch n.Health {
		case "down":
			fmt.Fprintf(tw, "?\t?\t%s\tdown (%s)\t\t\n", n.Admin, n.Error)
		case "storage_failed":
			fmt.Fprintf(tw, "%d\t%s\t%s\tstorage failed: %s\t%d\t%d\t%s\n", n.Node, n.Client, n.Admin, n.Error, n.Masters, n.Conns, n.Version)
		default:
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\n", n.Node, n.Client, n.Admin, n.Health, n.Masters, n.Conns, n.Version)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(s.Groups) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tMASTER\tEPOCH\tAPPLIED\tLOCKS")
	for _, g := range s.Groups {
		m := "none"
		if g.Master != 0 {
			m = fmt.Sprint(g.Master)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\n", g.Group, m, g.Epoch, g.Applied, g.Locks)
	}
	return tw.Flush()
}

// membersOutput is members' output: the configured members.
type membersOutput struct {
	Members []member `json:"members"`
}

// member is one configured member (from /status) and how it answers.
type member struct {
	ID     uint32 `json:"id"`
	Peer   string `json:"peer"`
	Client string `json:"client"`
	Gossip string `json:"gossip,omitempty"`
	Admin  string `json:"admin,omitempty"`
	// Health is up, down, storage_failed, or unknown when its admin
	// address is neither configured nor among -admin.
	Health  string `json:"health"`
	Masters int    `json:"masters"`
	Error   string `json:"error,omitempty"`
}

func (m membersOutput) table(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPEER\tCLIENT\tGOSSIP\tADMIN\tHEALTH\tMASTERS")
	for _, n := range m.Members {
		health := n.Health
		if n.Error != "" {
			health += " (" + n.Error + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\n", n.ID, n.Peer, n.Client, n.Gossip, n.Admin, health, n.Masters)
	}
	return tw.Flush()
}

// waitOutput is wait's output once every group has a master.
type waitOutput struct {
	Groups  int `json:"groups"`
	Serving int `json:"serving"`
}

func (o waitOutput) table(w io.Writer) error {
	_, err := fmt.Fprintf(w, "%d of %d groups have a serving master\n", o.Serving, o.Groups)
	return err
}

// namespacesOutput is namespace list's output: the namespaces, and the
// quotas of those that have one with their use as the answering node
// sees it.
type namespacesOutput struct {
	Namespaces []string               `json:"namespaces"`
	Quotas     []adminapi.QuotaStatus `json:"quotas"`
}

func (o namespacesOutput) table(w io.Writer) error {
	quotas := map[string]adminapi.QuotaStatus{}
	for _, q := range o.Quotas {
		quotas[q.Namespace] = q
	}
	for _, n := range o.Namespaces {
		line := n
		if q, ok := quotas[n]; ok {
			line = fmt.Sprintf("%s\tquota: %s; %d holders", n, quotaText(q.Quota), q.Held)
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}

// namespaceChange is namespace add's and remove's output.
type namespaceChange struct {
	Namespace string `json:"namespace"`
	// Action is add or remove.
	Action string `json:"action"`
	Done   bool   `json:"done"`
}

func (o namespaceChange) table(w io.Writer) error {
	_, err := fmt.Fprintf(w, "namespace %s: %s done\n", o.Namespace, o.Action)
	return err
}

// unlockOutput is unlock --force's output: the holds removed (none: the
// key was free). JSON: {"namespace", "key", "released": [{"client",
// "owner", "token"}]}.
type unlockOutput adminapi.ForceUnlocked

func (o unlockOutput) table(w io.Writer) error {
	if len(o.Released) == 0 {
		_, err := fmt.Fprintf(w, "%s/%s: not held, nothing to do\n", o.Namespace, o.Key)
		return err
	}
	for _, h := range o.Released {
		if _, err := fmt.Fprintf(w, "%s/%s: released the hold of client %d owner %d (token %d)\n", o.Namespace, o.Key, h.Client, h.Owner, h.Token); err != nil {
			return err
		}
	}
	return nil
}

// filesOutput is certs' output.
type filesOutput struct {
	Wrote []string `json:"wrote"`
}

func (o filesOutput) table(w io.Writer) error {
	for _, f := range o.Wrote {
		if _, err := fmt.Fprintln(w, "wrote", f); err != nil {
			return err
		}
	}
	return nil
}

// stateOutput is state's output.
type stateOutput struct {
	Key  string `json:"key"`
	Held bool   `json:"held"`
	// Holder is the holder's owner as client/id in hex ("" when free).
	Holder string `json:"holder"`
	Token  uint64 `json:"token"`
	// Kind is exclusive, read or write ("" when free).
	Kind      string `json:"kind"`
	Readers   int    `json:"readers"`
	TTLLeftMs int64  `json:"ttl_left_ms"`
	QueueLen  int    `json:"queue_len"`
	Value     string `json:"value"`
	// Permits and InUse: a semaphore's total and permits held (omitted
	// for locks).
	Permits int `json:"permits,omitempty"`
	InUse   int `json:"in_use,omitempty"`
	// DelayLeftMs is what is left of the key's lock-delay, during which
	// nobody new is granted it (omitted when none).
	DelayLeftMs int64 `json:"delay_left_ms,omitempty"`
}

func stateRecord(st client.State) stateOutput {
	o := stateOutput{Key: st.Key, Held: st.Held, QueueLen: st.QueueLen, DelayLeftMs: st.DelayLeft.Milliseconds()}
	if st.Held {
		o.Holder, o.Token, o.Kind = st.Holder.String(), st.Token, st.Kind.String()
		o.Readers, o.TTLLeftMs, o.Value = st.Readers, st.TTLLeft.Milliseconds(), st.Value
		o.Permits, o.InUse = st.Permits, st.InUse
	}
	return o
}

func (o stateOutput) table(w io.Writer) error {
	var err error
	if !o.Held && o.DelayLeftMs > 0 {
		_, err = fmt.Fprintf(w, "%s: free, in a lock-delay for %s (%d waiting)\n", o.Key,
			time.Duration(o.DelayLeftMs)*time.Millisecond, o.QueueLen)
		return err
	}
	if !o.Held {
		_, err = fmt.Fprintf(w, "%s: free (%d waiting)\n", o.Key, o.QueueLen)
		return err
	}
	_, err = fmt.Fprintf(w, "%s: held by %s (%s), token %d, %s left, %d waiting", o.Key, o.Holder, o.Kind,
		o.Token, (time.Duration(o.TTLLeftMs) * time.Millisecond).String(), o.QueueLen)
	if err == nil && o.Value != "" {
		_, err = fmt.Fprintf(w, ", value %q", o.Value)
	}
	if err == nil && o.Permits != 0 {
		_, err = fmt.Fprintf(w, ", %d of %d permits in use by %d holders", o.InUse, o.Permits, o.Readers)
	}
	if err == nil {
		_, err = fmt.Fprintln(w)
	}
	return err
}

// locksOutput is locks' output: held locks in key order, each as state
// prints it; more says -limit cut the list short.
type locksOutput struct {
	Prefix string        `json:"prefix"`
	Locks  []stateOutput `json:"locks"`
	More   bool          `json:"more"`
}

func (o locksOutput) table(w io.Writer) error {
	for _, l := range o.Locks {
		if err := l.table(w); err != nil {
			return err
		}
	}
	var err error
	switch {
	case o.More:
		_, err = fmt.Fprintf(w, "(%d shown; more: raise -limit)\n", len(o.Locks))
	case len(o.Locks) == 0:
		_, err = fmt.Fprintf(w, "no lock held under %q\n", o.Prefix)
	}
	return err
}

// lockEvent is one line of lock's output: locked, then released.
type lockEvent struct {
	// Event is locked or released.
	Event string `json:"event"`
	Key   string `json:"key"`
	Token uint64 `json:"token"`
	// WaitedMs is how long the acquire took (locked).
	WaitedMs int64 `json:"waited_ms,omitempty"`
	// HoldMs is how long the lock will be held (locked).
	HoldMs int64 `json:"hold_ms,omitempty"`
}

func (e lockEvent) table(w io.Writer) error {
	var err error
	if e.Event == "locked" {
		_, err = fmt.Fprintf(w, "locked %s after %s, fencing token %d; holding for %s\n", e.Key,
			time.Duration(e.WaitedMs)*time.Millisecond, e.Token, time.Duration(e.HoldMs)*time.Millisecond)
	} else {
		_, err = fmt.Fprintf(w, "%s %s\n", e.Event, e.Key)
	}
	return err
}

// watchEvent is one line of watch's output.
type watchEvent struct {
	// Time is when paxlockctl received the event (RFC 3339, UTC).
	Time string `json:"time"`
	Key  string `json:"key"`
	// Event is acquired, released, expired, revoked or timeout; for
	// watch -prefix also moved (Key: the prefix; see watchPrefixCmd).
	Event string `json:"event"`
	Token uint64 `json:"token"`
	// Holder is the new holder as client/id in hex (acquired), else "".
	Holder string `json:"holder"`
	Value  string `json:"value"`
}

func watchRecord(ev client.Event) watchEvent {
	o := watchEvent{Time: time.Now().UTC().Format(time.RFC3339Nano), Key: ev.Key, Event: ev.Type.String(), Token: ev.Token, Value: ev.Value}
	if !ev.Holder.IsZero() {
		o.Holder = ev.Holder.String()
	}
	return o
}

func (e watchEvent) table(w io.Writer) error {
	line := fmt.Sprintf("%s %s %s token %d", e.Time, e.Key, e.Event, e.Token)
	if e.Holder != "" {
		line += " holder " + e.Holder
	}
	if e.Value != "" {
		line += fmt.Sprintf(" value %q", e.Value)
	}
	_, err := fmt.Fprintln(w, line)
	return err
}
