package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/paxlock/paxlock/adminapi"
)

// errNotDrained is drain's error when the node answered but a peer does
// not master each of its groups yet.
var errNotDrained = errors.New("not every group handed over")

// drain asks node id (found among -admin's nodes by its /status) to hand
// the groups it masters to its peers and master none until it restarts
// (POST /drain), or with undo to master again (DELETE /drain), and prints
// what it did.
func drain(ctx context.Context, p printer, ac *adminClient, id uint32, undo bool, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addr := ""
	for _, r := range ac.fetchAll(ctx) {
		if r.err == nil && r.st.Node == id {
			addr = r.addr
		}
	}
	if addr == "" {
		return fmt.Errorf("drain: no node of -admin answers as node %d", id)
	}
	method := http.MethodPost
	if undo {
		method = http.MethodDelete
	}
	req, err := ac.request(ctx, method, addr, "/drain", nil)
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	resp, err := ac.do(req, timeout)
	if err != nil {
		return fmt.Errorf("drain: node %d at %s: %w", id, addr, err)
	}
	defer func() { _ = resp.Body.Close() }() // read (up to 1 MiB) or abandoned: nothing to report
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("drain: node %d at %s: %w", id, addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("drain: node %d at %s: HTTP %d: %s", id, addr, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	var d adminapi.Drained
	if err := json.Unmarshal(b, &d); err != nil {
		return fmt.Errorf("drain: node %d at %s: %w", id, addr, err)
	}
	if undo {
		return p.emit(undrainOutput(d))
	}
	if err := p.emit(drainOutput(d)); err != nil {
		return err
	}
	if !d.Served {
		return fmt.Errorf("drain: node %d: %w: %s", id, errNotDrained, d.Reason)
	}
	return nil
}

// drainOutput is drain's output.
type drainOutput adminapi.Drained

func (o drainOutput) table(w io.Writer) error {
	var err error
	switch {
	case len(o.Groups) == 0 && o.Reason == "":
		_, err = fmt.Fprintf(w, "node %d mastered no group; it will master none until it restarts\n", o.Node)
	case o.Served:
		_, err = fmt.Fprintf(w, "node %d handed groups %v to its peers in %d ms; it masters none until it restarts\n", o.Node, o.Groups, o.TookMs)
	default:
		_, err = fmt.Fprintf(w, "node %d: groups %v not all handed over: %s\n", o.Node, o.Groups, o.Reason)
	}
	return err
}

// undrainOutput is drain -undo's output.
type undrainOutput adminapi.Drained

func (o undrainOutput) table(w io.Writer) error {
	if !o.Served {
		_, err := fmt.Fprintf(w, "node %d masters again; its peers were not all told (%s): placement gives it its groups back once gossip has it\n", o.Node, o.Reason)
		return err
	}
	_, err := fmt.Fprintf(w, "node %d masters again: placement gives it back its groups\n", o.Node)
	return err
}
