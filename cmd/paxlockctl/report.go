// This file is the admin reports: status, members and wait, from every
// node's GET /status.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/paxlock/paxlock/adminapi"
)

func (a *adminClient) fetchStatus(ctx context.Context, addr string) (adminapi.Status, error) {
	var st adminapi.Status
	req, err := a.request(ctx, http.MethodGet, addr, "/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := a.do(req, 3*time.Second)
	if err != nil {
		return st, err
	}
	defer func() { _ = resp.Body.Close() }() // read to the end or abandoned: nothing to report
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s: %s", addr, resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// nodeReport is one admin address's answer to /status.
type nodeReport struct {
	addr string
	st   adminapi.Status
	err  error
}

func (a *adminClient) fetchAll(ctx context.Context) []nodeReport {
	out := make([]nodeReport, len(a.addrs))
	for i, addr := range a.addrs {
		st, err := a.fetchStatus(ctx, addr)
		out[i] = nodeReport{addr: addr, st: st, err: err}
	}
	return out
}

func status(ctx context.Context, p printer, ac *adminClient) error {
	reports := ac.fetchAll(ctx)
	out := statusOutput{Nodes: []statusNode{}, Groups: []statusGroup{}}
	var up []adminapi.Status
	for _, r := range reports {
		n := statusNode{Admin: r.addr, Health: "down"}
		if r.err != nil {
			n.Error = r.err.Error()
			out.Nodes = append(out.Nodes, n)
			continue
		}
		n.Node, n.Client, n.Conns, n.ViewVersion, n.Version = r.st.Node, r.st.Client, r.st.Conns, r.st.ViewVersion, r.st.Version
		n.Health = "up"
		if r.st.StorageFailed {
			n.Health, n.Error = "storage_failed", r.st.StorageError
		}
		for _, g := range r.st.Groups {
			if g.Serving {
				n.Masters++
			}
		}
		out.Nodes = append(out.Nodes, n)
		up = append(up, r.st)
	}
	if len(up) > 0 {
		for g := range up[0].Groups {
			sg := statusGroup{Group: g}
			for _, r := range up {
				if g >= len(r.Groups) {
					continue
				}
				gs := r.Groups[g]
				if gs.Serving {
					sg.Master, sg.Locks = r.Node, gs.Locks
				}
				sg.Epoch = max(sg.Epoch, gs.Epoch)
				sg.Applied = max(sg.Applied, gs.Applied)
			}
			out.Groups = append(out.Groups, sg)
		}
	}
	if err := p.emit(out); err != nil {
		return err
	}
	if len(up) == 0 {
		return errors.New("no node answered")
	}
	return nil
}

func members(ctx context.Context, p printer, ac *adminClient) error {
	reports := ac.fetchAll(ctx)
	out := membersOutput{Members: []member{}}
	// The configured member list, from the first node that answers.
	var cfgNodes []adminapi.NodeAddr
	for _, r := range reports {
		if r.err == nil {
			cfgNodes = r.st.Nodes
			break
		}
	}
	if cfgNodes == nil {
		return errors.New("no node answered")
	}
	byAdmin := map[string]nodeReport{}
	byID := map[uint32]nodeReport{}
	for _, r := range reports {
		byAdmin[r.addr] = r
		if r.err == nil {
			byID[r.st.Node] = r
		}
	}
	for _, n := range cfgNodes {
		m := member{ID: n.ID, Peer: n.Peer, Client: n.Client, Gossip: n.Gossip, Admin: n.Admin, Health: "unknown"}
		r, ok := byID[n.ID]
		if !ok && n.Admin != "" {
			r, ok = byAdmin[n.Admin]
		}
		switch {
		case ok && r.err != nil:
			m.Health, m.Error = "down", r.err.Error()
		case ok && r.st.StorageFailed:
			m.Health, m.Error = "storage_failed", r.st.StorageError
		case ok:
			m.Health = "up"
			for _, g := range r.st.Groups {
				if g.Serving {
					m.Masters++
				}
			}
		}
		out.Members = append(out.Members, m)
	}
	return p.emit(out)
}

// wait polls the nodes' admin endpoints until every group has a serving
// master.
func wait(ctx context.Context, p printer, ac *adminClient, limit time.Duration, balanced bool) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		serving := map[int]bool{}
		perNode := map[uint32]int{}
		groups, answered, asked := 0, 0, 0
		for _, r := range ac.fetchAll(ctx) {
			asked++
			if r.err != nil {
				continue
			}
			answered++
			groups = len(r.st.Groups)
			perNode[r.st.Node] = 0
			for _, g := range r.st.Groups {
				if g.Serving {
					serving[g.Group] = true
					perNode[r.st.Node]++
				}
			}
		}
		ready := groups > 0 && len(serving) == groups
		if ready && balanced {
			ready = answered == asked && spreadEvenly(perNode, groups)
		}
		if ready {
			return p.emit(waitOutput{Groups: groups, Serving: len(serving)})
		}
		select {
		case <-ctx.Done():
			if balanced {
				return fmt.Errorf("after %v, %d of %d groups have a master, %d of %d nodes answered, masters per node %v: %w", limit, len(serving), groups, answered, asked, perNode, ctx.Err())
			}
			return fmt.Errorf("after %v, %d of %d groups have a master: %w", limit, len(serving), groups, ctx.Err())
		case <-tick.C:
		}
	}
}

// spreadEvenly reports whether every node serves groups/nodes groups,
// rounded down or up.
func spreadEvenly(perNode map[uint32]int, groups int) bool {
	if len(perNode) == 0 {
		return false
	}
	lo := groups / len(perNode)
	hi := (groups + len(perNode) - 1) / len(perNode)
	for _, n := range perNode {
		if n < lo || n > hi {
			return false
		}
	}
	return true
}
