package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/paxlock/paxlock/adminapi"
)

// This file moves a namespace between two lock clusters, there and back
// several times, under the chaos suite's workload (exclusive and
// read-write locks, blocking and try-locks, renewals by hand and
// automatic, a semaphore, watches, the holder view with its
// force-unlocks), with a kill -9 during moves: of a node of the source,
// of a node of the target, and of the registry that drives the move;
// before every third move, one is aborted half-way (the source frozen
// or copying) with a kill -9 of a source node during the abort, and must
// roll back with the namespace still on the source.
// The history must stay linearizable (porcupine), tokens must rise per
// key across every move, and no two holders may believe they hold a key
// at once.

const (
	moveRegNS     = "registry"
	moveRegSecret = "registry-secret"
	moveCount     = 6
	moveLimit     = 90 * time.Second // a move, kills included, ends within this
)

// moveLab is the multi-cluster of the move test.
type moveLab struct {
	t          *testing.T
	meta       *cluster
	lock       map[string]*cluster
	registries *cluster
	metaAdmin  string
}

// startLockCluster starts a 3-node lock cluster with no namespace of its
// own: the registries install the namespace where it is assigned.
func startLockCluster(t *testing.T, bin, dir string) *cluster {
	c := newCluster(t, bin, dir)
	var nodes []nodeAddrs
	for i := 1; i <= 3; i++ {
		nodes = append(nodes, nodeAddrs{ID: i, Peer: freePort(t), Client: freePort(t), Admin: freePort(t)})
	}
	for i := 1; i <= 3; i++ {
		c.add(i, nodes, nodes[i-1].Admin, "", map[string]any{"namespaces": []any{}})
	}
	return c
}

func newMoveLab(t *testing.T) *moveLab {
	dir := t.TempDir()
	bin := buildPaxlockd(t, dir)
	lab := &moveLab{t: t, lock: map[string]*cluster{}}
	for _, name := range []string{"meta", "east", "west", "registries"} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	lab.meta = newCluster(t, bin, filepath.Join(dir, "meta"))
	metaNode := nodeAddrs{ID: 1, Peer: freePort(t), Client: freePort(t), Admin: freePort(t)}
	lab.meta.add(1, []nodeAddrs{metaNode}, metaNode.Admin, "", map[string]any{
		"registry_namespace": moveRegNS,
		"namespaces":         []map[string]string{{"name": moveRegNS, "secret": moveRegSecret}},
	})
	lab.metaAdmin = "http://" + metaNode.Admin
	for _, name := range []string{"east", "west"} {
		lab.lock[name] = startLockCluster(t, bin, filepath.Join(dir, name))
	}
	for _, name := range []string{"east", "west"} {
		c := lab.lock[name]
		lab.change(http.MethodPut, "/registry/clusters/"+name, adminapi.RegistryClusterPut{Client: c.addrs(), Admin: c.admins()})
	}
	lab.change(http.MethodPut, "/registry/namespaces/e2e", adminapi.RegistryNamespacePut{Cluster: "east", Secret: "s"})

	secret := filepath.Join(dir, "registries", "meta.secret")
	if err := os.WriteFile(secret, []byte(moveRegSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	lab.registries = newCluster(t, bin, filepath.Join(dir, "registries"))
	for i := 1; i <= 2; i++ {
		listen, status := freePort(t), freePort(t)
		cfg := map[string]any{
			"listen": listen, "admin_listen": status,
			"meta": map[string]any{"addrs": lab.meta.addrs(), "namespace": moveRegNS, "secret_file": secret,
				"admin": lab.meta.admins()},
		}
		b, _ := json.Marshal(cfg)
		path := filepath.Join(dir, "registries", fmt.Sprintf("r%d.json", i))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		p := &proc{id: i, cfg: path, addr: listen, admin: status, args: []string{"-role", "registry"}}
		lab.registries.procs = append(lab.registries.procs, p)
		lab.registries.start(p)
	}
	return lab
}

// change sends a change to the meta cluster's admin API until it is
// answered 204 (a 503 is a master change under way).
func (lab *moveLab) change(method, path string, body any) {
	lab.t.Helper()
	b, _ := json.Marshal(body)
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequest(method, lab.metaAdmin+path, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			msg, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return
			}
			err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, msg)
		}
		if time.Now().After(deadline) {
			lab.t.Fatalf("%s %s: %v", method, path, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// move reads the namespace's move record.
func (lab *moveLab) move() (adminapi.RegistryMove, error) {
	resp, err := http.Get(lab.metaAdmin + "/registry")
	if err != nil {
		return adminapi.RegistryMove{}, err
	}
	defer resp.Body.Close()
	var reg adminapi.Registry
	if err := json.NewDecoder(resp.Body).Decode(&reg); err != nil {
		return adminapi.RegistryMove{}, err
	}
	for _, m := range reg.Moves {
		if m.Namespace == "e2e" {
			return m, nil
		}
	}
	return adminapi.RegistryMove{}, nil
}

// driver returns the registry process that holds the mover lock, nil if
// none says so.
func (lab *moveLab) driver() *proc {
	for _, p := range lab.registries.procs {
		if p.cmd == nil {
			continue
		}
		resp, err := http.Get("http://" + p.admin + "/status")
		if err != nil {
			continue
		}
		var st struct{ Mover bool }
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err == nil && st.Mover {
			return p
		}
	}
	return nil
}

// TestMoveUnderLoad: see the top of the file. It runs with make e2e.
func TestMoveUnderLoad(t *testing.T) {
	if os.Getenv("PAXLOCK_E2E") == "" {
		t.Skip("set PAXLOCK_E2E=1 (make e2e) to run the namespace move under load")
	}
	lab := newMoveLab(t)
	seed := rand.Uint64()
	base := time.Now()
	s := &schedule{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x30fe)), kinds: map[string]int{}, n: 3,
		c: lab.lock["east"], registry: lab.registries.addrs()}
	s.admins = func() []string { return append(lab.lock["east"].admins(), lab.lock["west"].admins()...) }
	s.hx, s.hrw = &history{base: base}, &history{base: base}
	s.sem = &semWorkload{h: &history{base: base}, total: chaosSemPermits, key: "sem"}
	s.hv = newHolderView(base)
	t.Logf("seed %d", seed)

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	wl := newWorkload(s)
	defer wl.stop()
	var err error
	for range 100 {
		if err = wl.start(ctx); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("workload: %v", err)
	}
	s.logf("workload started on east, through the registries")
	time.Sleep(3 * time.Second)

	from, to := "east", "west"
	var pauses []time.Duration
	id, aborted := uint64(0), 0
	for i := 1; i <= moveCount; i++ {
		if i%3 == 0 {
			// Before every third move, one aborted half-way.
			id++
			if lab.abortedMove(s, id, from, to) {
				aborted++
			} else {
				from, to = to, from // it flipped before the abort came: done
			}
			time.Sleep(2 * time.Second)
		}
		id++
		cur, err := lab.move()
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		lab.change(http.MethodPut, "/registry/moves/e2e", adminapi.RegistryMove{Namespace: "e2e", ID: id, From: from, To: to,
			State: adminapi.MovePrepare, Token: cur.Token})
		s.logf("move %d: %s to %s", id, from, to)
		lab.fault(s, i, id, from, to)
		lab.waitMove(s, id, adminapi.MoveDone)
		lab.checkAssigned(to)
		pauses = append(pauses, time.Since(start))
		s.logf("move %d done after %v", id, time.Since(start).Round(time.Millisecond))
		time.Sleep(2 * time.Second)
		from, to = to, from
	}
	recovered := s.waitRecovered(wl, recoverLimit)
	time.Sleep(calmPhase)
	wl.stop()
	var violations []string
	if !recovered {
		violations = append(violations, fmt.Sprintf("no recovery: some key was not granted within %v after the last move", recoverLimit))
	}
	violations = append(violations, s.check(wl)...)
	t.Logf("%d moves (each from its record to done: %v), %d aborted half-way; %d operations, %d grants, %d semaphore grants, %d watch events; holder view: %v",
		moveCount, pauses, aborted, len(s.hx.ops)+len(s.hrw.ops)+len(s.sem.h.ops), len(s.hx.grants)+len(s.hrw.grants)+len(s.sem.h.grants),
		s.sem.grants(), wl.watchEvents(), s.hvSt)
	for _, v := range violations {
		t.Errorf("violation: %s", v)
	}
}

// fault injects the fault of the i-th full move (record id), if it has
// one: a kill -9 of a source node, of a target node, or of the driving
// registry, each restarted after a moment.
func (lab *moveLab) fault(s *schedule, i int, id uint64, from, to string) {
	var c *cluster
	var p *proc
	switch i % 3 {
	case 1:
		c = lab.lock[from]
		p = c.procs[s.rng.IntN(len(c.procs))]
	case 2:
		c = lab.lock[to]
		p = c.procs[s.rng.IntN(len(c.procs))]
	default:
		c = lab.registries
		p = lab.driver()
		if p == nil {
			s.logf("move %d: no registry says it drives; no fault", id)
			return
		}
	}
	time.Sleep(time.Duration(s.rng.IntN(30)) * time.Millisecond)
	s.logf("move %d: kill -9 %s process %d", id, map[*cluster]string{lab.lock["east"]: "east", lab.lock["west"]: "west", lab.registries: "registry"}[c], p.id)
	c.kill(p)
	time.Sleep(time.Duration(500+s.rng.IntN(1500)) * time.Millisecond)
	c.start(p)
	s.logf("move %d: process %d restarted", id, p.id)
}

// waitMove waits until move id has ended in state want.
func (lab *moveLab) waitMove(s *schedule, id uint64, want adminapi.MoveState) {
	deadline := time.Now().Add(moveLimit)
	for {
		m, err := lab.move()
		if err == nil && m.ID == id && m.State.Finished() {
			if m.State != want {
				lab.t.Fatalf("move %d ended %s, want %s", id, m.State, want)
			}
			return
		}
		if time.Now().After(deadline) {
			lab.t.Fatalf("move %d not %s within %v: %+v %v", id, want, moveLimit, m, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkAssigned checks that the registry's tables assign the namespace
// to cluster name.
func (lab *moveLab) checkAssigned(name string) {
	lab.t.Helper()
	resp, err := http.Get(lab.metaAdmin + "/registry")
	if err != nil {
		lab.t.Fatal(err)
	}
	defer resp.Body.Close()
	var reg adminapi.Registry
	if err := json.NewDecoder(resp.Body).Decode(&reg); err != nil {
		lab.t.Fatal(err)
	}
	for _, n := range reg.Namespaces {
		if n.Name == "e2e" && n.Cluster != name {
			lab.t.Fatalf("namespace e2e is assigned to %q, want %q", n.Cluster, name)
		}
	}
}

// abortedMove records move id from `from` to `to`, waits until it is
// half-way (the source frozen, or copying), asks for its abort as
// paxlockctl namespace move abort does, kills -9 a node of the source
// while the abort runs, and waits until the move has rolled back with
// the namespace still on `from`. It reports false, with the move done,
// if the move flipped before the abort was recorded (it can then only
// complete).
func (lab *moveLab) abortedMove(s *schedule, id uint64, from, to string) bool {
	t := lab.t
	cur, err := lab.move()
	if err != nil {
		t.Fatal(err)
	}
	lab.change(http.MethodPut, "/registry/moves/e2e", adminapi.RegistryMove{Namespace: "e2e", ID: id, From: from, To: to,
		State: adminapi.MovePrepare, Token: cur.Token})
	s.logf("move %d: %s to %s, to be aborted half-way", id, from, to)
	deadline := time.Now().Add(moveLimit)
	for {
		m, err := lab.move()
		switch {
		case err != nil || m.ID != id || m.State < adminapi.MoveFreeze:
		case m.State.Flipped():
			s.logf("move %d reached %s before the abort: it completes", id, m.State)
			lab.waitMove(s, id, adminapi.MoveDone)
			return false
		default:
			m.State = adminapi.MoveAborting
			if lab.tryChange(http.MethodPut, "/registry/moves/e2e", m) {
				s.logf("move %d: abort recorded half-way", id)
				c := lab.lock[from]
				p := c.procs[s.rng.IntN(len(c.procs))]
				s.logf("move %d: kill -9 %s process %d during the abort", id, from, p.id)
				c.kill(p)
				time.Sleep(time.Duration(500+s.rng.IntN(1000)) * time.Millisecond)
				c.start(p)
				lab.waitMove(s, id, adminapi.MoveAborted)
				lab.checkAssigned(from)
				s.logf("move %d rolled back", id)
				return true
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("move %d never reached its freeze within %v: %+v %v", id, moveLimit, m, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tryChange sends one change to the meta cluster's admin API and reports
// whether it was answered 204.
func (lab *moveLab) tryChange(method, path string, body any) bool {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, lab.metaAdmin+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusNoContent
}
