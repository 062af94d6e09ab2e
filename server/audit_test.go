package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
)

// auditLog reads GET /audit from node s, nil when it does not answer.
func auditLog(t *testing.T, s *Server, query string) (*adminapi.AuditLog, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.cfg.self().Admin + "/audit" + query)
	if err != nil {
		return nil, ""
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out adminapi.AuditLog
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &out) != nil {
		return nil, string(raw)
	}
	return &out, string(raw)
}

// findAudit returns the record of log with action and namespace.
func findAudit(l *adminapi.AuditLog, action, ns string) (adminapi.AuditRecord, bool) {
	if l == nil {
		return adminapi.AuditRecord{}, false
	}
	for _, r := range l.Records {
		if r.Action == action && r.Namespace == ns {
			return r, true
		}
	}
	return adminapi.AuditRecord{}, false
}

// TestAuditForceUnlockReadFromAnyNode: a force-unlock asked of node 1
// (served by the key's master wherever it is), a namespace added and a
// quota set each leave an audit record that node 3 serves from its own
// replica of group 0, with who asked, when, what and from where; the
// namespace's secret is nowhere in the log; node 3's
// paxlock_audit_records counts them.
func TestAuditForceUnlockReadFromAnyNode(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A key whose group another node than group 0's master serves: its
	// force-unlock's record is relayed to group 0's master.
	key, served := "", uint32(0)
	waitFor(t, "a key served away from group 0's master", func() bool {
		sys := servingNode(tc, group.NamespaceGroup)
		for i := range 200 {
			k := fmt.Sprintf("audited-%d", i)
			g := group.Of(wire.KeyHash("ns", k), len(tc.nodes[0].svc.Groups()))
			if m := servingNode(tc, g); sys != 0 && m != 0 && m != sys {
				key, served = k, m
				return true
			}
		}
		return false
	})
	c := newClient(t, tc)
	m := c.Mutex(key, client.TTL(time.Hour), client.AutoRenew())
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	n1, n3 := tc.nodes[0], tc.nodes[2]
	before := time.Now().Add(-time.Minute)
	body, _ := json.Marshal(map[string]string{"namespace": "ns", "key": key})
	resp, err := http.Post("http://"+n1.cfg.self().Admin+"/locks/unlock", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("force unlock: HTTP %d", resp.StatusCode)
	}
	const secret = "audit-never-logs-this"
	waitFor(t, "namespace ns2 added", func() bool {
		return adminDo(t, http.MethodPost, "http://"+n1.cfg.self().Admin+"/namespaces", map[string]string{"name": "ns2", "secret": secret}) == http.StatusNoContent
	})
	if code := adminDo(t, http.MethodPut, "http://"+n1.cfg.self().Admin+"/namespaces/ns/quota", map[string]int{"held": 5}); code != http.StatusNoContent {
		t.Fatalf("quota: HTTP %d", code)
	}

	var log *adminapi.AuditLog
	var raw string
	waitFor(t, "node 3's audit log holds the three changes", func() bool {
		log, raw = auditLog(t, n3, "")
		_, a := findAudit(log, "force_unlock", "ns")
		_, b := findAudit(log, "namespace_put", "ns2")
		_, q := findAudit(log, "quota_set", "ns")
		return a && b && q
	})
	if log.Node != n3.cfg.NodeID {
		t.Fatalf("answered by node %d, want node 3's replica", log.Node)
	}
	fu, _ := findAudit(log, "force_unlock", "ns")
	when, err := time.Parse(time.RFC3339Nano, fu.Time)
	if fu.Target != key || fu.Node < 1 || fu.Node > 3 || fu.Actor == "" || !strings.HasPrefix(fu.Source, "127.0.0.1:") || fu.Node == 0 || fu.Outcome != "ok" || fu.Seq == 0 || err != nil || when.Before(before) {
		t.Fatalf("force-unlock record %+v (time: %v)", fu, err)
	}
	if fu.Node != served {
		t.Logf("the key's group moved from node %d to node %d before the force-unlock", served, fu.Node)
	}
	if q, _ := findAudit(log, "quota_set", "ns"); !strings.Contains(q.Target, "held=5") || q.Outcome != "ok" {
		t.Fatalf("quota record %+v", q)
	}
	if strings.Contains(raw, secret) {
		t.Fatalf("the namespace's secret is in the audit log: %s", raw)
	}
	// Filters and paging.
	if l, _ := auditLog(t, n3, "?action=quota_set"); l == nil || len(l.Records) == 0 || l.Records[0].Action != "quota_set" {
		t.Fatalf("action filter: %+v", l)
	}
	if l, _ := auditLog(t, n3, "?since="+jsonNum(fu.Seq)); l == nil || len(l.Records) == 0 || l.Records[0].Seq <= fu.Seq {
		t.Fatalf("since %d: %+v", fu.Seq, l)
	}
	if l, _ := auditLog(t, n3, "?limit=0"); l != nil {
		t.Fatal("limit=0 accepted")
	}
	resp, err = http.Get("http://" + n3.cfg.self().Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !strings.Contains(string(metrics), "\npaxlock_audit_records ") || strings.Contains(string(metrics), "\npaxlock_audit_records 0\n") {
		t.Fatal("paxlock_audit_records missing or 0 on node 3")
	}
}

// servingNode returns the node that serves group g now (0: none).
func servingNode(tc *testCluster, g group.ID) uint32 {
	for _, s := range tc.nodes {
		if s.svc.Group(g).Serving() {
			return s.cfg.NodeID
		}
	}
	return 0
}

func jsonNum(n uint64) string { b, _ := json.Marshal(n); return string(b) }
