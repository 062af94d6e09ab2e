package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/paxlock/paxlock/adminapi"
)

// fakeMeta is a meta cluster's registry tables behind its admin API, with
// a driver that ends every move it is shown: a recorded move is reported
// done (aborted after an abort) from the next read on.
type fakeMeta struct {
	mu   sync.Mutex
	reg  adminapi.Registry
	puts []adminapi.RegistryMove
}

func (f *fakeMeta) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/registry/moves/") {
		var m adminapi.RegistryMove
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.puts = append(f.puts, m)
		f.reg.Moves = []adminapi.RegistryMove{m}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	_ = json.NewEncoder(w).Encode(f.reg)
	for i, m := range f.reg.Moves { // the driver's work, seen at the next read
		switch m.State {
		case adminapi.MoveAborting:
			f.reg.Moves[i].State = adminapi.MoveAborted
		case adminapi.MovePrepare:
			f.reg.Moves[i].State = adminapi.MoveDone
			f.reg.Namespaces[0].Cluster = m.To
		}
	}
}

// TestNamespaceMoveCommands: namespace move records a move from the
// namespace's cluster and waits for its end; status prints the record;
// abort is refused for an ended or flipped move and asks for the abort
// of one that has not flipped; a move to the namespace's own cluster or
// of a namespace with a move under way is refused.
func TestNamespaceMoveCommands(t *testing.T) {
	f := &fakeMeta{reg: adminapi.Registry{
		Clusters:   []adminapi.RegistryCluster{{Name: "east"}, {Name: "west"}},
		Namespaces: []adminapi.RegistryNamespace{{Name: "app", Cluster: "east", Epoch: 1}},
	}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	flags := []string{"-admin", strings.TrimPrefix(srv.URL, "http://"), "-admin-ca", "", "-admin-token-file", ""}
	ctl := func(args ...string) (int, string, string) { return runCtl(t, "", append(flags, args...)...) }

	if code, out, errOut := ctl("namespace", "move", "app", "-to", "west"); code != 0 || !strings.Contains(out, "app\tmove 1\teast -> west\tdone") {
		t.Fatalf("move: exit %d, %q %q", code, out, errOut)
	}
	if p := f.puts[0]; p.State != adminapi.MovePrepare || p.From != "east" || p.To != "west" || p.ID != 1 {
		t.Fatalf("recorded %+v", p)
	}
	if code, out, _ := ctl("namespace", "move", "status", "app", "-o", "json"); code != 0 || !strings.Contains(out, `"state":"done"`) {
		t.Errorf("status: exit %d, %q", code, out)
	}
	if code, _, errOut := ctl("namespace", "move", "abort", "app"); code != 1 || !strings.Contains(errOut, "no move under way") {
		t.Errorf("abort of an ended move: exit %d, %q", code, errOut)
	}
	if code, _, errOut := ctl("namespace", "move", "app", "-to", "west"); code != 1 || !strings.Contains(errOut, "already") {
		t.Errorf("move to its own cluster: exit %d, %q", code, errOut)
	}

	f.mu.Lock()
	f.reg.Moves = []adminapi.RegistryMove{{Namespace: "app", ID: 2, From: "west", To: "east", State: adminapi.MoveCopy, Token: 7}}
	f.mu.Unlock()
	if code, _, errOut := ctl("namespace", "move", "app", "-to", "east"); code != 1 || !strings.Contains(errOut, "under way") {
		t.Errorf("second move while one is under way: exit %d, %q", code, errOut)
	}
	if code, out, errOut := ctl("namespace", "move", "abort", "app"); code != 0 || !strings.Contains(out, "aborted") {
		t.Fatalf("abort: exit %d, %q %q", code, out, errOut)
	}
	if p := f.puts[len(f.puts)-1]; p.State != adminapi.MoveAborting || p.ID != 2 || p.Token != 7 {
		t.Fatalf("abort recorded %+v", p)
	}
	f.mu.Lock()
	f.reg.Moves = []adminapi.RegistryMove{{Namespace: "app", ID: 3, From: "west", To: "east", State: adminapi.MoveDrop, Token: 7}}
	f.mu.Unlock()
	if code, _, errOut := ctl("namespace", "move", "abort", "app"); code != 1 || !strings.Contains(errOut, "flipped") {
		t.Errorf("abort after the flip: exit %d, %q", code, errOut)
	}
	if code, _, _ := ctl("namespace", "move", "app"); code != 2 {
		t.Errorf("move without -to: exit %d, want 2 (usage)", code)
	}
}
