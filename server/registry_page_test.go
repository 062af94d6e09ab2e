package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/testutil"
)

// TestRegistryPagedConverges: tables that take many pages (pages and
// max_output made small here, so that 400 namespaces with verifiers take
// dozens of pages and overflow max_output: each verifier costs a PBKDF2
// derivation, slow under -race) reach a registry process
// exactly as group 0 holds them, while namespaces are added and removed
// during its paging; a subscriber of the earlier, unpaged protocol is
// refused ERROR naming the pages (its tables do not fit max_output), and
// a page of a version not being served is refused BAD_REQUEST.
func TestRegistryPagedConverges(t *testing.T) {
	t.Parallel()
	meta := startClusterWith(t, 1, func(c *Config) {
		c.RegistryNamespace = testRegNS
		c.Namespaces = append(c.Namespaces, Namespace{Name: testRegNS, Secret: testRegSecret})
		c.MaxOutput = 24 << 10
	})
	node := meta.nodes[0]
	node.reg.mu.Lock()
	node.reg.pageBytes = 1 << 10
	node.reg.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	put := func(f func() error, what string) {
		t.Helper()
		testutil.EventuallyWith(t, 30*time.Second, func() (bool, string) {
			err := f()
			return err == nil, fmt.Sprint(err)
		}, "%s", what)
	}
	put(func() error {
		return node.svc.PutRegistryCluster(ctx, adminapi.RegistryCluster{Name: "c1", Client: []string{"127.0.0.1:1"}})
	}, "cluster c1")
	const n = 400
	for i := range n {
		name := fmt.Sprintf("ns-%05d", i)
		put(func() error { return node.svc.PutRegistryNamespace(ctx, name, "c1", "secret-"+name) }, name)
	}

	r := startRegistry(t, meta.clientAddrs())
	done := make(chan struct{})
	go func() { // changes while the registry pages
		defer close(done)
		for i := range 40 {
			_ = node.svc.PutRegistryNamespace(ctx, fmt.Sprintf("late-%03d", i), "c1", "late-secret")
			_ = node.svc.DeleteRegistryNamespace(ctx, fmt.Sprintf("ns-%05d", i*7))
		}
	}()
	<-done
	testutil.EventuallyWith(t, 2*time.Minute, func() (bool, string) {
		want := registryMessage(node.svc.RegistryTables())
		got := r.Tables()
		if got == nil {
			return false, "no tables"
		}
		return reflect.DeepEqual(got, want), fmt.Sprintf("registry at version %d with %d namespaces, meta at %d with %d",
			got.Version, len(got.Namespaces), want.Version, len(want.Namespaces))
	}, "the registry holds exactly the meta cluster's tables")
	node.reg.mu.Lock()
	pages := len(node.reg.snap.pages)
	node.reg.mu.Unlock()
	if pages < 20 {
		t.Fatalf("the tables took %d pages, want many", pages)
	}

	checkRegistryHTTPPages(t, node)

	old := dialRaw(t, meta.clientAddrs()[0])
	if r := old.hello(testRegNS, testRegSecret, 1); r.Status != wire.StatusSuccess {
		t.Fatalf("hello: %+v", r)
	}
	if r := old.call(wire.TypeSubscribeRegistry, &wire.SubscribeRegistry{}); r.Status != wire.StatusError || !strings.Contains(r.Msg, "pages") {
		t.Fatalf("an unpaged subscription to tables over max_output: %+v, want ERROR naming the pages", r)
	}
	paged := dialRaw(t, meta.clientAddrs()[0])
	paged.hello(testRegNS, testRegSecret, 2)
	first, ok := paged.callAny(wire.TypeSubscribeRegistry, &wire.SubscribeRegistry{Paged: true}).(*wire.RegistryTables)
	if !ok || !first.Paged || !first.More || first.Page != 0 {
		t.Fatalf("paged subscription's reply: %+v", first)
	}
	if r := paged.call(wire.TypeSubscribeRegistry, &wire.SubscribeRegistry{Version: first.Version + 1, Paged: true, Page: 1}); r.Status != wire.StatusBadRequest {
		t.Fatalf("a page of a version not served: %+v, want BAD_REQUEST", r)
	}
	if r := paged.call(wire.TypeSubscribeRegistry, &wire.SubscribeRegistry{Version: first.Version, Paged: true, Page: uint32(pages)}); r.Status != wire.StatusBadRequest {
		t.Fatalf("a page past the last: %+v, want BAD_REQUEST", r)
	}
}

// checkRegistryHTTPPages: with replies bounded to 4 KiB, GET /registry
// unpaged is refused 413 naming the pages, the pages (each under the
// bound) list every entry of the tables once, and a bad limit or cursor
// is 400.
func checkRegistryHTTPPages(t *testing.T, node *Server) {
	t.Helper()
	const bound = 4 << 10
	node.reg.mu.Lock()
	node.reg.replyBytes = bound
	node.reg.mu.Unlock()
	base := "http://" + node.cfg.AdminAddr + "/registry"
	get := func(url string) (int, []byte) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, b := get(base); code != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "pages") {
		t.Fatalf("unpaged GET /registry of tables over the bound: HTTP %d %s, want 413", code, b)
	}
	for _, q := range []string{"?limit=0", "?limit=10001", "?after=x", "?after=n:bad%20name", "?after=q:a"} {
		if code, b := get(base + q); code != http.StatusBadRequest {
			t.Errorf("GET /registry%s: HTTP %d %s, want 400", q, code, b)
		}
	}
	want := node.svc.RegistryTables()
	var names []string
	after, pages := "", 0
	for first := true; first || after != ""; first = false {
		code, b := get(base + "?limit=10000&after=" + after)
		if code != http.StatusOK || len(b) > bound {
			t.Fatalf("page after %q: HTTP %d, %d bytes (bound %d)", after, code, len(b), bound)
		}
		var page adminapi.Registry
		if err := json.Unmarshal(b, &page); err != nil {
			t.Fatal(err)
		}
		if page.Version != want.Version {
			t.Fatalf("page of version %d, tables at %d", page.Version, want.Version)
		}
		for _, c := range page.Clusters {
			names = append(names, "c:"+c.Name)
		}
		for _, n := range page.Namespaces {
			names = append(names, "n:"+n.Name)
		}
		after, pages = page.Next, pages+1
	}
	var wantNames []string
	for _, c := range want.Clusters {
		wantNames = append(wantNames, "c:"+c.Name)
	}
	for _, n := range want.Namespaces {
		wantNames = append(wantNames, "n:"+n.Name)
	}
	if !reflect.DeepEqual(names, wantNames) || pages < 3 {
		t.Fatalf("%d pages listed %d entries, want %d in order over several pages", pages, len(names), len(wantNames))
	}
}
