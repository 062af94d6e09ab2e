package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/internal/buildinfo"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/server/adminhttp"
)

// This file is the web console at the admin address: a page (console/,
// embedded) that shows the whole cluster, and the JSON it reads. The node
// that serves the page gathers the cluster's state itself — its own
// status, and every peer's /status?detail=1 over the peers' admin
// addresses with this node's admin token — so the browser talks to one
// origin with one certificate, and sends the token (if any) to it only.

// Console limits.
const (
	// ConsoleHotKeys is how many of the hottest keys /status?detail=1 and
	// /cluster list.
	ConsoleHotKeys = 10
	// ConsoleMasterChanges is how many master changes a node remembers,
	// and /cluster lists.
	ConsoleMasterChanges = 32
	// consolePeerTimeout bounds a peer's answer to /status?detail=1.
	consolePeerTimeout = adminhttp.DetailTimeout
)

// masterLog remembers the last ConsoleMasterChanges master changes a node
// saw, newest last. It is written on the paxos loop, a few times per
// election: a ring under a mutex.
type masterLog struct {
	mu   sync.Mutex
	last map[int]uint32 // group -> last known nonzero master
	ring []adminapi.MasterChange
	next int
}

// record notes that group g's master is now st (if it is a master).
func (l *masterLog) record(g group.ID, st paxos.SoftState) {
	if st.Master == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = make(map[int]uint32)
	}
	c := adminapi.MasterChange{Time: time.Now(), Group: int(g), From: l.last[int(g)], To: uint32(st.Master), Epoch: st.Ballot.Round}
	l.last[int(g)] = c.To
	if len(l.ring) < ConsoleMasterChanges {
		l.ring = append(l.ring, c)
		return
	}
	l.ring[l.next] = c
	l.next = (l.next + 1) % ConsoleMasterChanges
}

// list returns the remembered changes, newest first.
func (l *masterLog) list() []adminapi.MasterChange {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]adminapi.MasterChange, 0, len(l.ring))
	for i := range l.ring {
		out = append(out, l.ring[(l.next+len(l.ring)-1-i)%len(l.ring)])
	}
	return out
}

// StatusDetail is Status with what the console adds: the hottest keys of
// the groups this node serves and the master changes it saw.
func (s *Server) StatusDetail(ctx context.Context) adminapi.Status {
	st := s.Status()
	hk, err := s.svc.HotKeys(ctx, ConsoleHotKeys)
	if err != nil {
		s.log.Debug("console: hot keys", "err", err)
	}
	st.HotKeys = hk
	st.MasterChanges = s.masterLog.list()
	st.Quotas = s.quotas()
	st.Namespaces = s.namespaceUse()
	st.Clients, st.ClientsMore = s.clientSessions()
	return st
}

// consoleClient returns the HTTP client the node reads its peers' admin
// endpoints with: HTTPS verified against the cluster CA when the admin
// endpoint is HTTPS. Keep-alives are off, so that no connection outlives
// a request (a console refreshes once a second; nodes are few).
func (s *Server) consoleClient() *http.Client {
	s.consoleOnce.Do(func() {
		tr := &http.Transport{DisableKeepAlives: true}
		if s.sec.adminTLS != nil {
			tc := &tls.Config{MinVersion: tls.VersionTLS12}
			if s.sec.peer != nil {
				_, tc.RootCAs = s.sec.peer.Current()
			}
			tr.TLSClientConfig = tc
		}
		s.consoleHTTP = &http.Client{Transport: tr, Timeout: consolePeerTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	})
	return s.consoleHTTP
}

// peerStatus reads node n's /status?detail=1.
func (s *Server) peerStatus(ctx context.Context, n NodeAddr) (adminapi.Status, error) {
	var st adminapi.Status
	if n.Admin == "" {
		return st, errors.New("no admin address configured")
	}
	scheme := "http://"
	if s.sec.adminTLS != nil {
		scheme = "https://"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+n.Admin+"/status?detail=1", nil)
	if err != nil {
		return st, err
	}
	if s.sec.adminToken != "" {
		req.Header.Set("Authorization", "Bearer "+s.sec.adminToken)
	}
	resp, err := s.consoleClient().Do(req)
	if err != nil {
		return st, err
	}
	defer func() { _ = resp.Body.Close() }() // read below
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status %s", resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st); err != nil {
		return st, fmt.Errorf("decode status: %w", err)
	}
	return st, nil
}

// ClusterStatus gathers the cluster's state: this node's, and every
// peer's over its admin address, all at once, each within
// consolePeerTimeout.
func (s *Server) ClusterStatus(ctx context.Context) adminapi.ClusterStatus {
	v := s.view.Load()
	cs := adminapi.ClusterStatus{Node: s.cfg.NodeID, Time: time.Now(), ViewVersion: v.Version}
	if in, ok := buildinfo.Current(); ok {
		cs.Version = in.String()
	}
	nodes := s.nodes()
	sts := make([]*adminapi.Status, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		if n.ID == s.cfg.NodeID {
			st := s.StatusDetail(ctx)
			sts[i] = &st
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := s.peerStatus(ctx, n)
			if err != nil {
				errs[i] = err
				return
			}
			sts[i] = &st
		}()
	}
	wg.Wait()
	mastered := map[uint32]int{}
	for _, g := range v.Groups {
		mastered[g.Master]++
	}
	byID := map[uint32]*adminapi.Status{}
	for i, n := range nodes {
		cn := adminapi.ConsoleNode{ID: n.ID, Client: n.Client, Admin: n.Admin, Mastered: mastered[n.ID]}
		for _, nv := range v.Nodes {
			if nv.ID == n.ID {
				cn.Alive = nv.Alive
			}
		}
		if st := sts[i]; st != nil {
			byID[n.ID] = st
			cn.Reachable, cn.Ready, cn.ReadyReason = true, st.Ready, st.ReadyReason
			cn.StorageFailed, cn.Conns, cn.Version, cn.UptimeMs = st.StorageFailed, st.Conns, st.Version, st.UptimeMs
			cs.Namespaces = append(cs.Namespaces, st.Namespaces...)
			cn.Clients, cn.ClientsMore = st.Clients, st.ClientsMore
			cs.HotKeys = append(cs.HotKeys, st.HotKeys...)
			cs.MasterChanges = append(cs.MasterChanges, st.MasterChanges...)
			cs.Quotas = append(cs.Quotas, st.Quotas...)
		} else {
			cn.Error = errs[i].Error()
		}
		cs.Nodes = append(cs.Nodes, cn)
	}
	self := byID[s.cfg.NodeID]
	for g, gv := range v.Groups {
		cg := adminapi.ConsoleGroup{Group: g, Master: gv.Master, Epoch: gv.Epoch}
		src := byID[gv.Master]
		if src == nil || g >= len(src.Groups) {
			src = self
		}
		if g < len(src.Groups) {
			sg := src.Groups[g]
			cg.Serving, cg.Committed, cg.Applied, cg.Locks = sg.Serving, sg.Committed, sg.Applied, sg.Locks
			cg.Members, cg.MemberChange = sg.Members, sg.MemberChange
		}
		var top uint64
		for _, st := range byID {
			if g < len(st.Groups) {
				top = max(top, st.Groups[g].Committed)
			}
		}
		for _, n := range nodes {
			st := byID[n.ID]
			if st == nil || g >= len(st.Groups) {
				continue
			}
			a := st.Groups[g].Applied
			cg.Replicas = append(cg.Replicas, adminapi.ReplicaLag{Node: n.ID, Applied: a, Lag: top - min(a, top)})
		}
		cs.Groups = append(cs.Groups, cg)
	}
	group.SortHotKeys(cs.HotKeys)
	cs.HotKeys = cs.HotKeys[:min(len(cs.HotKeys), ConsoleHotKeys)]
	cs.MasterChanges = mergeMasterChanges(cs.MasterChanges, ConsoleMasterChanges)
	cs.Quotas = mergeQuotas(cs.Quotas)
	cs.Namespaces = mergeNamespaces(cs.Namespaces)
	if cs.HotKeys == nil {
		cs.HotKeys = []group.HotKey{}
	}
	return cs
}

// mergeMasterChanges folds the changes several nodes saw into one list,
// newest first, at most n: a change (group, new master, epoch) is listed
// once, at the earliest time a node saw it, with the previous master a
// node knew.
func mergeMasterChanges(all []adminapi.MasterChange, n int) []adminapi.MasterChange {
	type id struct {
		group int
		to    uint32
		epoch uint64
	}
	seen := map[id]int{}
	out := []adminapi.MasterChange{}
	for _, c := range all {
		k := id{c.Group, c.To, c.Epoch}
		i, ok := seen[k]
		if !ok {
			seen[k] = len(out)
			out = append(out, c)
			continue
		}
		if c.Time.Before(out[i].Time) {
			out[i].Time = c.Time
		}
		if out[i].From == 0 {
			out[i].From = c.From
		}
	}
	slices.SortFunc(out, func(a, b adminapi.MasterChange) int {
		return cmp.Or(b.Time.Compare(a.Time), cmp.Compare(a.Group, b.Group))
	})
	return out[:min(n, len(out))]
}
