package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
)

// TestChaos runs randomized fault schedules (make chaos): each a 3- or
// 5-node cluster of paxlockd processes, every node in its own network
// namespace (see netns_test.go), a mixed workload through the Go client,
// and a random sequence of faults; then it checks the history. Settings,
// from the environment (the Makefile passes them):
//
//	PAXLOCK_CHAOS=1        run at all (go test ./... skips the suite)
//	PAXLOCK_CHAOS_N=10     schedules to run
//	PAXLOCK_CHAOS_SEED=s   run the one schedule of seed s (a replay)
//
// Each schedule's seed decides the cluster size, the workload's choices
// and the faults (kind, node, timing); a replay repeats those decisions,
// though the interleaving of processes on the machine is not the same.
// It needs root (network namespaces, iptables); with PAXLOCK_CHAOS set it
// fails, never skips, when it cannot create them.
func TestChaos(t *testing.T) {
	if os.Getenv("PAXLOCK_CHAOS") == "" {
		t.Skip("set PAXLOCK_CHAOS=1 (make chaos) to run the randomized fault schedules; they need root")
	}
	n := 10
	if s := os.Getenv("PAXLOCK_CHAOS_N"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("PAXLOCK_CHAOS_N=%q: want a positive number of schedules", s)
		}
		n = v
	}
	var seeds []uint64
	if s := os.Getenv("PAXLOCK_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("PAXLOCK_CHAOS_SEED=%q: want a schedule's seed as printed by make chaos", s)
		}
		seeds = []uint64{v}
	} else {
		base := uint64(time.Now().UnixNano())
		t.Logf("chaos: %d schedules from base seed %d", n, base)
		r := rand.New(rand.NewPCG(base, 0x5eed))
		for range n {
			seeds = append(seeds, r.Uint64()%1e12)
		}
	}
	if err := netnsUsable(); err != nil {
		t.Fatalf("chaos: network namespaces unavailable: %v", err)
	}
	// One chaos run at a time on a machine: the next would remove this
	// one's namespaces as leftovers.
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "paxlock-chaos.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	defer func() { _ = os.Remove(lock.Name()) }() // the next run creates it again
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("chaos: another chaos run holds %s: %v", lock.Name(), err)
	}
	if err := cleanNet(); err != nil {
		t.Fatalf("chaos: removing a previous run's leftovers: %v", err)
	}
	if old, _ := filepath.Glob(filepath.Join(os.TempDir(), runDirPattern)); len(old) > 0 {
		for _, d := range old {
			if err := os.RemoveAll(d); err != nil {
				t.Fatalf("chaos: removing a previous run's files: %v", err)
			}
		}
	}
	// The run's files (binary, configs, data, logs) live in one directory,
	// which an interrupt can remove too (t.TempDir's clean-up would not
	// run).
	runDir, err := os.MkdirTemp("", runDirPattern)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := os.RemoveAll(runDir); err != nil {
			t.Errorf("chaos: removing the run's files: %v", err)
		}
	}()
	// Interrupted (Ctrl-C, kill): remove the namespaces and their nodes
	// before dying. A run killed with SIGKILL is cleaned at the next start.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		if _, ok := <-sigs; ok {
			// Best effort on the way out; the next run sweeps what is left.
			if err := errors.Join(cleanNet(), os.RemoveAll(runDir)); err != nil {
				fmt.Fprintln(os.Stderr, "chaos: interrupted; clean-up incomplete:", err)
			}
			os.Exit(2)
		}
	}()
	defer close(sigs)

	bin := buildPaxlockd(t, runDir)
	var total chaosStats
	var failed []uint64
	for i, seed := range seeds {
		var st chaosStats
		ok := t.Run(fmt.Sprintf("schedule-%d-seed-%d", i+1, seed), func(t *testing.T) {
			st = runSchedule(t, bin, filepath.Join(runDir, strconv.FormatUint(seed, 10)), seed)
		})
		total.add(st)
		if !ok {
			failed = append(failed, seed)
		}
	}
	t.Logf("chaos summary: %d schedules (%d failed), %d operations (%d grants), %d faults (%s), %d violations; holder view: %v",
		len(seeds), len(failed), total.ops, total.grants, total.faults, total.kindsString(), total.violations, total.hv)
	for _, s := range failed {
		t.Logf("chaos: failed schedule seed %d: replay with make chaos SEED=%d", s, s)
	}
}

type chaosStats struct {
	schedules, ops, grants, faults, violations int
	kinds                                      map[string]int // faults by kind
	hv                                         hvStats        // the holder view's
}

func (s *chaosStats) add(o chaosStats) {
	s.schedules += o.schedules
	s.ops += o.ops
	s.grants += o.grants
	s.faults += o.faults
	s.violations += o.violations
	s.hv.add(o.hv)
	if s.kinds == nil {
		s.kinds = map[string]int{}
	}
	for k, n := range o.kinds {
		s.kinds[k] += n
	}
}

// kindsString lists the fault counts by kind in a fixed order.
func (s *chaosStats) kindsString() string {
	var parts []string
	for _, k := range faultKinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, s.kinds[k]))
	}
	return strings.Join(parts, ", ")
}

// Ports: every node has its own address, so all use the same ones.
const (
	chaosPeerPort   = "7500"
	chaosClientPort = "7501"
	chaosGossipPort = "7502"
	chaosAdminPort  = "7503"
	chaosGroups     = 15
)

// Schedule timing.
const (
	faultPhase   = 30 * time.Second // faults are started during this
	recoverLimit = 45 * time.Second // after healing, every key is granted again within this
	calmPhase    = 3 * time.Second  // then the workload runs this much longer without faults
	upLimit      = 60 * time.Second // a fresh cluster serves every group within this
)

// schedule is one run: its cluster, network, workload and log.
type schedule struct {
	t    *testing.T
	seed uint64
	rng  *rand.Rand
	n    int
	c    *cluster
	net  *netLab
	hx   *history     // exclusive keys
	hrw  *history     // read-write keys
	sem  *semWorkload // the semaphore's workers, history and holds
	hv   *holderView  // what the holders believed, and the fault log
	hvSt hvStats      // what the holder view found (set by check)
	// registry and admins, when set, are where the workload's clients
	// fetch their view and where its force-unlocks go (the namespace
	// move test: registries, and every lock cluster's admin addresses);
	// unset, the cluster's nodes.
	registry []string
	admins   func() []string

	mu     sync.Mutex
	events []string // what happened, for the failure report
	faults int
	kinds  map[string]int
}

func (s *schedule) logf(format string, args ...any) {
	s.hv.note(format, args...)
	msg := fmt.Sprintf("%7.3fs ", time.Since(s.hx.base).Seconds()) + fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.events = append(s.events, msg)
	s.mu.Unlock()
	s.t.Log(msg)
}

// runDirPattern names a chaos run's directory under os.TempDir; any left
// when a run starts are a killed run's.
const runDirPattern = "paxlock-chaos-run-*"

// runSchedule runs the schedule of seed with its files in dir.
func runSchedule(t *testing.T, bin, dir string, seed uint64) chaosStats {
	s := &schedule{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0xc4a05)), kinds: map[string]int{}}
	s.n = 3
	if s.rng.IntN(2) == 1 {
		s.n = 5
	}
	base := time.Now()
	s.hx, s.hrw = &history{base: base}, &history{base: base}
	s.sem = &semWorkload{h: &history{base: base}, total: chaosSemPermits, key: "sem"}
	s.hv = newHolderView(base)
	t.Logf("schedule seed %d: %d nodes (replay: make chaos SEED=%d)", seed, s.n, seed)
	failed := true
	defer func() {
		if failed || t.Failed() {
			t.Errorf("schedule seed %d failed; replay with make chaos SEED=%d", seed, seed)
		}
	}()

	lab, err := newNetLab(s.n)
	if err != nil {
		t.Fatalf("network: %v", err)
	}
	s.net = lab
	t.Cleanup(func() {
		if err := cleanNet(); err != nil {
			t.Errorf("removing the network: %v", err)
		}
	})

	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing the schedule's files: %v", err)
		}
	})
	s.c = newCluster(t, bin, dir)
	var nodes []nodeAddrs
	for i := 1; i <= s.n; i++ {
		ip := nodeIP(i)
		nodes = append(nodes, nodeAddrs{ID: i, Peer: ip + ":" + chaosPeerPort, Client: ip + ":" + chaosClientPort,
			Gossip: ip + ":" + chaosGossipPort, Admin: ip + ":" + chaosAdminPort})
	}
	for i := 1; i <= s.n; i++ {
		s.c.add(i, nodes, nodes[i-1].Admin, nodeNS(i), map[string]any{"groups": chaosGroups})
	}
	s.waitServed(upLimit)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	wl := newWorkload(s)
	defer wl.stop() // if the schedule ends early
	if err := wl.start(ctx); err != nil {
		t.Fatalf("workload: %v", err)
	}
	s.logf("cluster up, workload started")

	s.runFaults()
	s.logf("faults over (%d); every node running and connected", s.faults)
	recovered := s.waitRecovered(wl, recoverLimit)
	time.Sleep(calmPhase)
	wl.stop()
	s.c.stopAll()

	st := chaosStats{schedules: 1, ops: len(s.hx.ops) + len(s.hrw.ops) + len(s.sem.h.ops), grants: len(s.hx.grants) + len(s.hrw.grants) + len(s.sem.h.grants), faults: s.faults, kinds: s.kinds}
	var violations []string
	if !recovered {
		violations = append(violations, fmt.Sprintf("no recovery: some key was not granted within %v after the faults were healed", recoverLimit))
	}
	violations = append(violations, s.check(wl)...)
	st.violations = len(violations)
	st.hv = s.hvSt
	t.Logf("schedule seed %d: %d nodes, %d operations (%d grants, %d of them semaphore grants, %d watch events), %d faults (%s), %d violations; holder view: %v",
		seed, s.n, st.ops, st.grants, s.sem.grants(), wl.watchEvents(), st.faults, st.kindsString(), st.violations, st.hv)
	if len(violations) > 0 {
		keep := filepath.Join(os.TempDir(), fmt.Sprintf("paxlock-chaos-%d", seed))
		if err := s.keepFiles(dir, keep); err != nil {
			t.Errorf("keeping the logs: %v", err)
		}
		for _, v := range violations {
			t.Errorf("violation: %s", v)
		}
		t.Errorf("node logs and the fault log kept in %s", keep)
		return st
	}
	failed = false
	return st
}

// keepFiles copies the node logs from dir, and writes the fault log, to
// keep.
func (s *schedule) keepFiles(dir, keep string) error {
	if err := os.MkdirAll(keep, 0o755); err != nil {
		return err
	}
	var errs []error
	for i := 1; i <= s.n; i++ {
		name := fmt.Sprintf("n%d.log", i)
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err == nil {
			err = os.WriteFile(filepath.Join(keep, name), b, 0o644)
		}
		errs = append(errs, err)
	}
	s.mu.Lock()
	events := strings.Join(s.events, "\n") + "\n"
	s.mu.Unlock()
	errs = append(errs, os.WriteFile(filepath.Join(keep, "events.txt"), []byte(events), 0o644))
	return errors.Join(errs...)
}

// status is what the chaos suite reads of a node's /status.
func (s *schedule) status(i int) (served int, ok bool) {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get("http://" + nodeIP(i) + ":" + chaosAdminPort + "/status")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var st struct {
		Groups []struct {
			Serving bool `json:"serving"`
		} `json:"groups"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return 0, false
	}
	for _, g := range st.Groups {
		if g.Serving {
			served++
		}
	}
	return served, true
}

// waitServed waits until the nodes' masters serve every group.
func (s *schedule) waitServed(limit time.Duration) {
	s.c.waitUntil("every group is served", limit, func() bool {
		total := 0
		for i := 1; i <= s.n; i++ {
			n, _ := s.status(i)
			total += n
		}
		return total >= chaosGroups
	})
}

// A fault is something done to the cluster and later undone.
type fault struct {
	kind string // one of faultKinds
	what string
	undo func()
}

// faultKinds are the kinds of fault inject chooses from.
var faultKinds = []string{"kill-9", "sigterm", "sigstop", "partition", "isolate", "one-way", "link-cut"}

// runFaults injects faults for faultPhase, in rounds: a pause, faults on
// random distinct nodes, a pause, and every fault undone. Most rounds hit
// a minority (one node of 3, one or two of 5), so a majority can make
// progress most of the time; one round in six on 3 nodes and one in ten
// on 5 hits a majority (two of 3, three of 5), and no group can commit
// until it is undone. Each fault lasts longer than a master lease (1 s).
func (s *schedule) runFaults() {
	end := time.Now().Add(faultPhase)
	for time.Now().Before(end) {
		time.Sleep(s.dur(500*time.Millisecond, 2500*time.Millisecond))
		victims := s.rng.Perm(s.n)
		k := 1
		switch r := s.rng.IntN(30); {
		case s.n == 3 && r < 5:
			k = 2
		case s.n == 5 && r < 3:
			k = 3
		case s.n == 5 && r < 12:
			k = 2
		}
		var active []fault
		for _, v := range victims[:k] {
			f := s.inject(v + 1)
			s.faults++
			s.kinds[f.kind]++
			s.logf("fault %d: %s", s.faults, f.what)
			active = append(active, f)
		}
		time.Sleep(s.dur(1500*time.Millisecond, 5*time.Second))
		for _, f := range active {
			f.undo()
			s.logf("undone: %s", f.what)
		}
	}
	if err := s.net.heal(); err != nil {
		s.t.Fatalf("heal: %v", err)
	}
}

// dur returns a random duration in [lo, hi).
func (s *schedule) dur(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)))
}

// others returns the node ids other than i, shuffled.
func (s *schedule) others(i int) []int {
	var out []int
	for _, j := range s.rng.Perm(s.n) {
		if j+1 != i {
			out = append(out, j+1)
		}
	}
	return out
}

// inject starts a random fault on node i.
func (s *schedule) inject(i int) fault {
	p := s.c.procs[i-1]
	must := func(err error) {
		if err != nil {
			s.t.Fatalf("fault injection: %v", err)
		}
	}
	heal := func() { must(s.net.heal()) }
	ips := func(ids []int) []string {
		var out []string
		for _, j := range ids {
			out = append(out, nodeIP(j))
		}
		return out
	}
	switch s.rng.IntN(7) {
	case 0:
		s.c.kill(p)
		return fault{kind: "kill-9", what: fmt.Sprintf("kill -9 node %d (restarted when undone)", i), undo: func() { s.c.start(p) }}
	case 1:
		s.c.stop(p, 10*time.Second)
		return fault{kind: "sigterm", what: fmt.Sprintf("SIGTERM node %d (restarted when undone)", i), undo: func() { s.c.start(p) }}
	case 2:
		must(p.cmd.Process.Signal(syscall.SIGSTOP))
		return fault{kind: "sigstop", what: fmt.Sprintf("SIGSTOP node %d", i), undo: func() { must(p.cmd.Process.Signal(syscall.SIGCONT)) }}
	case 3:
		// Symmetric: i and its peers drop each other's packets; clients
		// still reach i.
		peers := s.others(i)
		must(s.net.drop(i, ips(peers)...))
		for _, j := range peers {
			must(s.net.drop(j, nodeIP(i)))
		}
		return fault{kind: "partition", what: fmt.Sprintf("partition node %d from its peers %v (clients reach it)", i, peers), undo: heal}
	case 4:
		// Isolated from everyone, clients included.
		peers := s.others(i)
		must(s.net.drop(i, append(ips(peers), hostIP)...))
		for _, j := range peers {
			must(s.net.drop(j, nodeIP(i)))
		}
		return fault{kind: "isolate", what: fmt.Sprintf("isolate node %d from peers %v and clients", i, peers), undo: heal}
	case 5:
		// One-way: i hears nothing from some peers, they still hear i.
		peers := s.others(i)
		peers = peers[:1+s.rng.IntN(len(peers))]
		must(s.net.drop(i, ips(peers)...))
		return fault{kind: "one-way", what: fmt.Sprintf("one-way: node %d drops what it receives from %v", i, peers), undo: heal}
	default:
		// A symmetric cut between i and one peer; both still reach the
		// others.
		j := s.others(i)[0]
		must(s.net.drop(i, nodeIP(j)))
		must(s.net.drop(j, nodeIP(i)))
		return fault{kind: "link-cut", what: fmt.Sprintf("cut the link between nodes %d and %d", i, j), undo: heal}
	}
}

// waitRecovered waits until every key was granted (to anyone) after the
// last fault was healed.
func (s *schedule) waitRecovered(wl *workload, limit time.Duration) bool {
	healed := s.hx.now()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if wl.grantedSince(healed) {
			s.logf("every key granted again")
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// check runs every check on the history and returns the violations.
func (s *schedule) check(wl *workload) []string {
	var bad []string
	bad = append(bad, checkTokens(s.hx)...)
	bad = append(bad, checkTokens(s.hrw)...)
	bad = append(bad, checkHolds(s.hx)...)
	bad = append(bad, checkHolds(s.hrw)...)
	bad = append(bad, checkAnswers(s.hx)...)
	bad = append(bad, wl.checkWatches()...)
	bad = append(bad, checkTokens(s.sem.h)...)
	bad = append(bad, checkPermits(s.sem.uses, s.sem.total)...)
	fail, st := s.hv.verdict(s.t.Logf)
	s.hvSt = st
	bad = append(bad, fail...)
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("paxlock-chaos-%d", s.seed))
	if why := checkLinearizable(lockModel.ToModel(), s.hx.ops, "exclusive", dir, s.t.Logf); why != "" {
		bad = append(bad, why)
	}
	if why := checkLinearizable(rwModel.ToModel(), s.hrw.ops, "read-write", dir, s.t.Logf); why != "" {
		bad = append(bad, why)
	}
	if why := checkLinearizable(semModel.ToModel(), s.sem.h.ops, "semaphore", dir, s.t.Logf); why != "" {
		bad = append(bad, why)
	}
	return bad
}

// The workload: workers take exclusive and read-write locks (try-lock and
// blocking, some with AutoRenew, some renewed by hand), hold them and
// release them, or read an exclusive key's state, through three clients;
// watchers follow some keys; more workers take 1 or 2 of a semaphore's
// chaosSemPermits permits (semWorkload, as in TestFaults); and holders
// record what they believe they hold on keys of their own, renewing by
// hand with shorter and longer TTLs, pausing past their validity, with
// force-unlocks among them (hvWorkload, holderview_test.go).
var (
	chaosXKeys    = []string{"x0", "x1", "x2", "x3"}
	chaosRWKeys   = []string{"rw0", "rw1"}
	chaosFastKeys = []string{"f0", "f1"} // exclusive, taken and released at once
)

const (
	chaosWorkers  = 10
	chaosFast     = 4 // more workers, on chaosFastKeys
	chaosClients  = 3
	chaosDrift    = 0.05 // the clients' ClockDrift (their default)
	chaosWatchers = 2

	chaosSemWorkers = 3
	chaosSemPermits = 3

	chaosHVWorkers = 4
)

type workload struct {
	s       *schedule
	clients []*client.Client
	quit    chan struct{}
	wg      sync.WaitGroup
	stopped sync.Once

	mu      sync.Mutex
	owners  map[string]map[uint64]wire.Owner // key -> token -> owner granted it
	watched map[string][][]client.Event      // key -> each watch's events
}

func newWorkload(s *schedule) *workload {
	return &workload{s: s, quit: make(chan struct{}), owners: map[string]map[uint64]wire.Owner{}, watched: map[string][][]client.Event{}}
}

func (wl *workload) start(ctx context.Context) error {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	addrs := wl.s.registry
	if addrs == nil {
		addrs = wl.s.c.addrs()
	}
	for range chaosClients {
		var cl *client.Client
		var err error
		for range 50 {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			cl, err = client.New(cctx, client.Config{Registry: addrs, Namespace: "e2e", Secret: "s", Logger: quiet, ClockDrift: chaosDrift})
			cancel()
			if err == nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			return err
		}
		wl.clients = append(wl.clients, cl)
	}
	for w := range chaosWorkers + chaosFast {
		rng := rand.New(rand.NewPCG(wl.s.seed, uint64(w)))
		fast := w >= chaosWorkers
		cl := wl.clients[w%len(wl.clients)]
		wl.wg.Add(1)
		go func() {
			defer wl.wg.Done()
			for {
				select {
				case <-wl.quit:
					return
				default:
				}
				if fast {
					wl.fastStep(ctx, w+1, cl, rng)
				} else {
					wl.step(ctx, w+1, cl, rng)
				}
			}
		}()
	}
	// The semaphore's workers take ids after the lock workers' (their
	// history is separate; the ids only name them in a report).
	wl.s.sem.run(ctx, wl.clients[len(wl.clients)-1], chaosSemWorkers, chaosWorkers+chaosFast+1, wl.quit, &wl.wg)
	admins := wl.s.admins
	if admins == nil {
		admins = func() []string {
			var out []string
			for i := 1; i <= wl.s.n; i++ {
				out = append(out, nodeIP(i)+":"+chaosAdminPort)
			}
			return out
		}
	}
	newHVWorkload(wl.s.hv, "hv", wl.clients, admins).run(ctx, chaosHVWorkers, chaosWorkers+chaosFast+chaosSemWorkers+1, wl.s.seed, wl.quit, &wl.wg)
	for i := range chaosWatchers {
		keys := append(append([]string(nil), chaosXKeys...), chaosRWKeys...)
		key := keys[(wl.s.seed+uint64(i)*3)%uint64(len(keys))]
		cl := wl.clients[i%len(wl.clients)]
		wl.wg.Add(1)
		go func() {
			defer wl.wg.Done()
			wl.watch(ctx, cl, key)
		}()
	}
	return nil
}

// stop ends the workload (each worker finishes its current lock) and
// closes the clients. Calls after the first do nothing.
func (wl *workload) stop() {
	wl.stopped.Do(func() {
		close(wl.quit)
		wl.wg.Wait()
		for _, cl := range wl.clients {
			cl.Close()
		}
	})
}

// step takes one lock, holds it (renewing it or not) and releases it; or,
// one time in ten, reads the state of an exclusive key.
func (wl *workload) step(ctx context.Context, w int, cl *client.Client, rng *rand.Rand) {
	if rng.IntN(10) == 0 {
		key := chaosXKeys[rng.IntN(len(chaosXKeys))]
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		call := wl.s.hx.now()
		st, err := cl.State(sctx, key)
		ret := wl.s.hx.now()
		cancel()
		if err == nil {
			wl.s.hx.addAnswer(answer{key: key, call: call, ret: ret, held: st.Held, token: st.Token, what: "state"})
		} else {
			time.Sleep(20 * time.Millisecond)
		}
		return
	}
	ttl := time.Duration(1+rng.IntN(3)) * time.Second
	opts := []client.Option{client.TTL(ttl)}
	// How the lock is held: briefly; renewed by hand, each renewal up to
	// 0.8 TTL after the last; or with AutoRenew for up to 1.5 TTL.
	pattern := rng.IntN(10)
	short, manual, auto := pattern < 5, pattern >= 5 && pattern < 8, pattern >= 8
	if auto {
		opts = append(opts, client.AutoRenew())
	}
	var m *client.Mutex
	var h *history
	var key string
	read := false
	if rng.IntN(5) < 3 {
		key = chaosXKeys[rng.IntN(len(chaosXKeys))]
		m, h = cl.Mutex(key, opts...), wl.s.hx
	} else {
		key = chaosRWKeys[rng.IntN(len(chaosRWKeys))]
		rw := cl.RWMutex(key, opts...)
		read = rng.IntN(3) < 2
		m, h = rw.Writer(), wl.s.hrw
		if read {
			m = rw.Reader()
		}
	}
	rec := func(op rwOp, tok uint64, call, ret int64, out lockOutput) {
		var in any
		if h == wl.s.hx {
			in = lockInput{Key: key, Owner: w, Acquire: op == rwAcquire, Renew: op == rwRenew, Token: tok}
		} else {
			in = rwInput{Key: key, Owner: w, Read: read, Op: op, Token: tok}
		}
		h.add(porcupine.Operation{ClientId: w, Input: in, Call: call, Output: out, Return: ret})
	}

	block := rng.IntN(2) == 0
	lctx, cancel := context.WithTimeout(ctx, time.Duration(1+rng.IntN(3))*time.Second)
	call := h.now()
	var err error
	if block {
		err = m.Lock(lctx)
	} else {
		err = m.TryLock(lctx)
	}
	ret := h.now()
	cancel()
	if le := (*client.LockedError)(nil); errors.As(err, &le) && h == wl.s.hx {
		h.addAnswer(answer{key: key, call: call, ret: ret, held: true, token: le.Token, what: "try-lock"})
	}
	if err != nil {
		rec(rwAcquire, 0, call, ret, lockOutput{})
		if !errors.Is(err, client.ErrLocked) {
			time.Sleep(20 * time.Millisecond) // the cluster is in trouble: do not spin
		}
		return
	}
	tok := m.Token()
	rec(rwAcquire, 0, call, ret, lockOutput{OK: true, Token: tok})
	wl.mu.Lock()
	if wl.owners[key] == nil {
		wl.owners[key] = map[uint64]wire.Owner{}
	}
	wl.owners[key][tok] = m.Owner()
	wl.mu.Unlock()

	// The server keeps the hold at least until the last acquire or
	// renewal it granted was sent plus the TTL; the client counts less.
	validFrom := call
	renewals := 0
	switch {
	case short:
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
	case auto:
		time.Sleep(time.Duration(rng.Int64N(int64(ttl) * 3 / 2)))
	case manual:
		renewals = 1 + rng.IntN(3)
	}
	for r := renewals; r > 0; r-- {
		time.Sleep(time.Duration(rng.Int64N(int64(ttl) * 8 / 10)))
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		rcall := h.now()
		err := m.Renew(rctx, 0)
		rret := h.now()
		rcancel()
		rec(rwRenew, tok, rcall, rret, lockOutput{OK: err == nil})
		if err == nil {
			validFrom = rcall
		}
	}
	if manual {
		time.Sleep(time.Duration(rng.Int64N(int64(ttl) * 8 / 10)))
	}
	validUntil := validFrom + int64(float64(ttl)*(1-chaosDrift))

	uctx, ucancel := context.WithTimeout(ctx, 5*time.Second)
	rcall := h.now()
	err = m.Unlock(uctx)
	rret := h.now()
	ucancel()
	end, freed := rcall, rret
	if err != nil {
		freed = 0
		// It may have been released, or may expire once its validity
		// ends, whichever comes first, at any time after.
		rret = forever
		if validUntil < rcall {
			rcall = validUntil
		}
		end = rcall
	}
	rec(rwRelease, tok, rcall, rret, lockOutput{OK: err == nil, Unknown: err != nil})
	h.addHold(hold{key: key, owner: w, token: tok, read: read, start: ret, end: end, freed: freed})
}

// fastStep takes a lock on one of chaosFastKeys, try-lock or blocking,
// and releases it at once.
func (wl *workload) fastStep(ctx context.Context, w int, cl *client.Client, rng *rand.Rand) {
	h := wl.s.hx
	key := chaosFastKeys[rng.IntN(len(chaosFastKeys))]
	const ttl = 2 * time.Second
	m := cl.Mutex(key, client.TTL(ttl))
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	call := h.now()
	var err error
	if rng.IntN(2) == 0 {
		err = m.Lock(lctx)
	} else {
		err = m.TryLock(lctx)
	}
	ret := h.now()
	cancel()
	if le := (*client.LockedError)(nil); errors.As(err, &le) {
		h.addAnswer(answer{key: key, call: call, ret: ret, held: true, token: le.Token, what: "try-lock"})
	}
	if err != nil {
		h.add(porcupine.Operation{ClientId: w, Input: lockInput{Key: key, Owner: w, Acquire: true}, Call: call, Output: lockOutput{}, Return: ret})
		if !errors.Is(err, client.ErrLocked) {
			time.Sleep(20 * time.Millisecond)
		}
		return
	}
	tok := m.Token()
	h.add(porcupine.Operation{ClientId: w, Input: lockInput{Key: key, Owner: w, Acquire: true}, Call: call, Output: lockOutput{OK: true, Token: tok}, Return: ret})
	uctx, ucancel := context.WithTimeout(ctx, 5*time.Second)
	rcall := h.now()
	err = m.Unlock(uctx)
	rret := h.now()
	ucancel()
	end, freed := rcall, rret
	if err != nil {
		rret, freed = forever, 0
		end = min(rcall, call+int64(float64(ttl)*(1-chaosDrift)))
		rcall = end
	}
	h.add(porcupine.Operation{ClientId: w, Input: lockInput{Key: key, Owner: w, Token: tok}, Call: rcall, Output: lockOutput{OK: err == nil, Unknown: err != nil}, Return: rret})
	h.addHold(hold{key: key, owner: w, token: tok, start: ret, end: end, freed: freed})
}

// watch follows key with a continuous watch until the workload stops,
// starting a new watch (after the last token seen) when one ends.
func (wl *workload) watch(ctx context.Context, cl *client.Client, key string) {
	var last uint64
	for {
		select {
		case <-wl.quit:
			return
		default:
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		w, err := cl.Watch(wctx, key, last, client.Continuous())
		cancel()
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		var evs []client.Event
	loop:
		for {
			select {
			case ev, ok := <-w.Events():
				if !ok {
					break loop
				}
				evs = append(evs, ev)
				last = max(last, ev.Token)
			case <-wl.quit:
				w.Close()
				break loop
			}
		}
		wl.mu.Lock()
		wl.watched[key] = append(wl.watched[key], evs)
		wl.mu.Unlock()
	}
}

func (wl *workload) watchEvents() int {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	n := 0
	for _, ws := range wl.watched {
		for _, evs := range ws {
			n += len(evs)
		}
	}
	return n
}

// checkWatches: within a watch, the tokens of EventAcquired strictly
// increase, and an acquired token a worker was granted names that worker's
// owner.
func (wl *workload) checkWatches() []string {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	var bad []string
	for key, ws := range wl.watched {
		for _, evs := range ws {
			var top uint64
			for _, ev := range evs {
				if ev.Type != client.EventAcquired {
					continue
				}
				if ev.Token <= top {
					bad = append(bad, fmt.Sprintf("watch of %s: acquired token %d after %d", key, ev.Token, top))
				}
				top = max(top, ev.Token)
				if o, ok := wl.owners[key][ev.Token]; ok && o != ev.Holder && !isRW(key) {
					bad = append(bad, fmt.Sprintf("watch of %s: token %d acquired by %v, but granted to %v", key, ev.Token, ev.Holder, o))
				}
			}
		}
	}
	return bad
}

func isRW(key string) bool { return strings.HasPrefix(key, "rw") }

// grantedSince reports whether every key, the semaphore's too, was
// granted after t.
func (wl *workload) grantedSince(t int64) bool {
	for _, h := range []*history{wl.s.hx, wl.s.hrw, wl.s.sem.h} {
		h.mu.Lock()
		seen := map[string]bool{}
		for _, g := range h.grants {
			if g.call > t {
				seen[g.key] = true
			}
		}
		h.mu.Unlock()
		keys := append(slices.Clone(chaosXKeys), chaosFastKeys...)
		switch h {
		case wl.s.hrw:
			keys = chaosRWKeys
		case wl.s.sem.h:
			keys = []string{wl.s.sem.key}
		}
		for _, k := range keys {
			if !seen[k] {
				return false
			}
		}
	}
	return true
}
