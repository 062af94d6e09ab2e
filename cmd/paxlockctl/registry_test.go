package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/paxlock/paxlock/adminapi"
)

// TestRegistryCommands: cluster add|remove|list and namespace -meta
// add|remove|list send the meta cluster's admin API the changes (the
// namespace's secret from PAXLOCK_SECRET, its cluster from -cluster) and
// print its tables; a refused change exits 1 with the node's reason.
func TestRegistryCommands(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+string(b))
		mu.Unlock()
		switch {
		case r.Method == http.MethodGet:
			_ = json.NewEncoder(w).Encode(adminapi.Registry{Version: 3,
				Clusters:   []adminapi.RegistryCluster{{Name: "east", Client: []string{"e:1"}}},
				Namespaces: []adminapi.RegistryNamespace{{Name: "app", Cluster: "east", Epoch: 2}}})
		case strings.HasSuffix(r.URL.Path, "/busy"):
			http.Error(w, "busy: the cluster serves namespaces", http.StatusConflict)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer srv.Close()
	flags := []string{"-admin", strings.TrimPrefix(srv.URL, "http://"), "-admin-ca", "", "-admin-token-file", ""}
	t.Setenv(SecretEnv, "app-secret")
	for _, args := range [][]string{
		{"cluster", "add", "east", "e:1,e:2", "a:1"},
		{"cluster", "remove", "west"},
		{"namespace", "-meta", "add", "app", "-cluster", "east"},
		{"namespace", "-meta", "remove", "app"},
	} {
		if code, out, errOut := runCtl(t, "", append(flags, args...)...); code != 0 || !strings.Contains(out, "done") {
			t.Errorf("%v: exit %d, %q %q", args, code, out, errOut)
		}
	}
	if code, _, errOut := runCtl(t, "", append(flags, "cluster", "remove", "busy")...); code != 1 || !strings.Contains(errOut, "serves namespaces") {
		t.Errorf("refused remove: exit %d, %q", code, errOut)
	}
	if code, out, _ := runCtl(t, "", append(flags, "cluster", "list")...); code != 0 || !strings.Contains(out, "east\tclient=e:1") {
		t.Errorf("cluster list: exit %d, %q", code, out)
	}
	if code, out, _ := runCtl(t, "", append(flags, "namespace", "-meta", "list")...); code != 0 || !strings.Contains(out, "app\teast\tepoch 2") {
		t.Errorf("namespace -meta list: exit %d, %q", code, out)
	}
	if code, _, _ := runCtl(t, "", append(flags, "cluster", "add", "east")...); code != 2 {
		t.Errorf("cluster add without addresses: exit %d, want 2", code)
	}
	want := []string{
		`PUT /registry/clusters/east {"client":["e:1","e:2"],"admin":["a:1"]}`,
		`DELETE /registry/clusters/west `,
		`PUT /registry/namespaces/app {"cluster":"east","secret":"app-secret"}`,
		`DELETE /registry/namespaces/app `,
		`DELETE /registry/clusters/busy `,
		`GET /registry `,
		`GET /registry `,
	}
	mu.Lock()
	defer mu.Unlock()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("requests\n%q\nwant\n%q", got, want)
	}
}

// TestFetchRegistryPagesOneVersion: the tables are read page by page
// (?limit=&after=, each reply's next), and read again from the first page
// when the version changed between two pages, so what is printed is one
// version's every entry.
func TestFetchRegistryPagesOneVersion(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		version := uint64(2)
		if calls == 1 {
			version = 1 // the first page of a version that changes before the second
		}
		mu.Unlock()
		page := adminapi.Registry{Version: version}
		switch r.URL.Query().Get("after") {
		case "":
			page.Clusters, page.Next = []adminapi.RegistryCluster{{Name: "east", Client: []string{"e:1"}}}, "c:east"
		case "c:east":
			page.Namespaces, page.Next = []adminapi.RegistryNamespace{{Name: "a", Cluster: "east"}}, "n:a"
		case "n:a":
			page.Namespaces = []adminapi.RegistryNamespace{{Name: "b", Cluster: "east"}}
		default:
			http.Error(w, "bad cursor", http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(page)
	}))
	defer srv.Close()
	flags := []string{"-admin", strings.TrimPrefix(srv.URL, "http://"), "-admin-ca", "", "-admin-token-file", ""}
	code, out, errOut := runCtl(t, "", append(flags, "namespace", "-meta", "list")...)
	if code != 0 || !strings.Contains(out, "a\teast") || !strings.Contains(out, "b\teast") {
		t.Fatalf("namespace -meta list over pages: exit %d, %q %q", code, out, errOut)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 5 { // 2 pages of the changing read, then 3
		t.Fatalf("%d requests, want 5 (the read started over after the version changed)", calls)
	}
}
