package report

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/bench/load"
)

func lat(p99 float64) *load.Latency {
	return &load.Latency{Count: 100, P50Ms: p99 / 4, P90Ms: p99 / 2, P99Ms: p99, P999Ms: p99 * 2, MaxMs: p99 * 3,
		CDF: []load.CDFPoint{{Ms: p99 / 10, Frac: 0}, {Ms: p99 / 4, Frac: 0.5}, {Ms: p99, Frac: 0.99}, {Ms: p99 * 3, Frac: 1}}}
}

func result(sc load.Scenario, sys string, ops, p99 float64) load.Result {
	return load.Result{Scenario: sc, System: sys, Supported: true,
		OpsPerSec: load.Spread{Min: ops * 0.9, Median: ops, Max: ops * 1.1, N: 3},
		Acquire:   lat(p99), Release: lat(p99 / 2),
		Repeats: []load.Repeat{{OpsPerSec: ops * 0.9}, {OpsPerSec: ops}, {OpsPerSec: ops * 1.1}}}
}

func fixture(withPaxlock bool) *Report {
	unc := load.Scenario{Name: "uncontended", Kind: load.Uncontended, Workers: 64, Duration: 10 * time.Second, Warmup: 2 * time.Second, TTL: 10 * time.Second}
	con := load.Scenario{Name: "contended", Kind: load.Contended, Workers: 64, Keys: 16, Duration: 10 * time.Second, TTL: 10 * time.Second}
	rw := load.Scenario{Name: "rw", Kind: load.ReadWrite, Workers: 64, Keys: 16, ReadFraction: 0.9, Duration: 10 * time.Second, TTL: 10 * time.Second}
	sweep := func(w int) load.Scenario {
		return load.Scenario{Name: "sweep", Kind: load.Uncontended, Workers: w, Duration: 5 * time.Second, TTL: 10 * time.Second}
	}
	r := &Report{
		Started: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Finished: time.Date(2026, 1, 2, 3, 9, 5, 0, time.UTC),
		Machine: Machine{CPU: "Test CPU", Cores: 2, MemoryGiB: 24, Disk: "ext4", Kernel: "6.1", OS: "Debian", Go: "go1.26"},
		Repeats: 3,
	}
	systems := []System{
		{Name: "redis", Display: "Redis", Version: "7.0.15", Status: StatusOK, Wait: "polling"},
		{Name: "etcd", Display: "etcd", Version: "3.4.23", Status: StatusOK, Fencing: true},
		{Name: "zk", Display: "ZooKeeper", Version: "3.8.0", Status: StatusOK},
	}
	pax := System{Name: "paxlock", Display: "paxlock", Status: "paxlock: adapter not built yet"}
	if withPaxlock {
		pax = System{Name: "paxlock", Display: "paxlock", Version: "dev", Status: StatusOK, Fencing: true}
	}
	r.Systems = append([]System{pax}, systems...)
	add := func(sys string, f float64) {
		r.Results = append(r.Results,
			result(unc, sys, 10000*f, 2/f), result(con, sys, 1000*f, 20/f),
			result(sweep(1), sys, 1000*f, 1), result(sweep(64), sys, 8000*f, 1))
		if sys == "zk" || sys == "paxlock" {
			r.Results = append(r.Results, result(rw, sys, 500*f, 5))
		} else {
			r.Results = append(r.Results, load.Unsupported(rw, sys, "no read-write lock"))
		}
	}
	if withPaxlock {
		add("paxlock", 4)
	}
	add("redis", 2)
	add("etcd", 0.5)
	add("zk", 0.25)
	r.Results[1].Errors = map[string]int64{"acquire: timeout": 7}
	r.Results[1].ErrorSamples = map[string]string{"acquire: timeout": "context deadline exceeded"}
	return r
}

func TestMarkdownPeersAlone(t *testing.T) {
	md := fixture(false).Markdown([]string{"throughput-vs-workers.svg"})
	if strings.Contains(md, "paxlock / Redis") {
		t.Error("ratio columns without paxlock in the run")
	}
	for _, want := range []string{
		"the table shows the peers alone",
		"| paxlock | — | — | — | **not run:** paxlock: adapter not built yet |",
		"| uncontended, 64w | ops/s (median of 3) | 20,000 | 5,000 | 2,500 |",
		"| Redis | n/a: no read-write lock |",
		"acquire: timeout × 7",
		"![throughput-vs-workers](throughput-vs-workers.svg)",
		"No overlapping holds",
		"2 cores (Test CPU)",
		"| 64 | 16,000 | 4,000 | 2,000 |",
		"## Noise",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	checkTables(t, md)
}

func TestMarkdownRatios(t *testing.T) {
	md := fixture(true).Markdown(nil)
	for _, want := range []string{
		"| scenario | metric | paxlock | Redis | etcd | ZooKeeper | paxlock / Redis | paxlock / etcd | paxlock / ZooKeeper |",
		// paxlock 40,000 vs 20,000 / 5,000 / 2,500 ops/s
		"| uncontended, 64w | ops/s (median of 3) | 40,000 | 20,000 | 5,000 | 2,500 | 2.00× | 8.00× | 16.00× |",
		// p99 0.5 ms vs 1 / 4 / 8 ms
		"|  | acquire p99 (ms) | 0.500 | 1.00 | 4.00 | 8.00 | 0.50× | 0.12× | 0.06× |",
		// rw: only ZooKeeper has it
		"| n/a | n/a | 1.00× |",
		"| 64 | 32,000 | 16,000 | 4,000 | 2,000 | 2.00× | 8.00× | 16.00× |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if strings.Contains(md, "peers alone") {
		t.Error("peers-alone note with paxlock in the run")
	}
	checkTables(t, md)
}

// checkTables checks every Markdown table row has as many cells as its header.
func checkTables(t *testing.T, md string) {
	t.Helper()
	cells := -1
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "|") {
			cells = -1
			continue
		}
		n := strings.Count(strings.ReplaceAll(line, `\|`, ""), "|") - 1
		if cells < 0 {
			cells = n
			continue
		}
		if n != cells {
			t.Errorf("row with %d cells in a table of %d: %s", n, cells, line)
		}
	}
}

func TestGuardSummaryReportsOverlaps(t *testing.T) {
	r := fixture(false)
	for i := range r.Results {
		if r.Results[i].System == "redis" && r.Results[i].Scenario.Name == "contended" {
			r.Results[i].Overlaps = 3
		}
	}
	md := r.Markdown(nil)
	if !strings.Contains(md, "Redis in contended (64w): 3 overlapping holds") {
		t.Error("overlaps not reported")
	}
}

func TestChartsAreWellFormedSVG(t *testing.T) {
	charts := fixture(true).Charts()
	names := map[string]bool{}
	for _, c := range charts {
		names[c.File] = true
		svg := c.Chart.SVG()
		dec := xml.NewDecoder(bytes.NewReader(svg))
		lines := 0
		for {
			tok, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: not well-formed XML: %v", c.File, err)
			}
			if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
				lines++
			}
		}
		if lines == 0 {
			t.Errorf("%s: no lines drawn", c.File)
		}
		if bytes.Contains(svg, []byte("NaN")) || bytes.Contains(svg, []byte("Inf")) {
			t.Errorf("%s: NaN or Inf in coordinates", c.File)
		}
	}
	for _, want := range []string{"throughput-vs-workers.svg", "latency-cdf-uncontended.svg", "latency-cdf-contended.svg", "latency-cdf-rw.svg"} {
		if !names[want] {
			t.Errorf("no chart %s (have %v)", want, names)
		}
	}
}

func TestEmptyChartStillRenders(t *testing.T) {
	svg := Chart{Title: "empty <&>", XLog: true}.SVG()
	if err := xml.Unmarshal(svg, new(struct{})); err != nil {
		t.Fatalf("empty chart is not XML: %v", err)
	}
	if !bytes.Contains(svg, []byte("empty &lt;&amp;&gt;")) {
		t.Error("title not escaped")
	}
}

func TestWriteAll(t *testing.T) {
	dir := t.TempDir()
	files, err := fixture(false).WriteAll(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 4 {
		t.Fatalf("wrote only %v", files)
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("results.json does not parse: %v", err)
	}
	if len(back.Systems) != 4 || back.Machine.Cores != 2 {
		t.Errorf("round trip lost data: %d systems, %d cores", len(back.Systems), back.Machine.Cores)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "results.md"))
	if !bytes.Contains(md, []byte("(throughput-vs-workers.svg)")) {
		t.Error("results.md does not embed the plot")
	}
}

func TestFormatting(t *testing.T) {
	for in, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -4500: "-4,500"} {
		if got := fmtInt(in); got != want {
			t.Errorf("fmtInt(%d) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[float64]string{0.0123: "0.012", 0.5: "0.500", 1.234: "1.23", 12.34: "12.3", 123.4: "123", 0.0004: "0.0004"} {
		if got := fmtMs(in); got != want {
			t.Errorf("fmtMs(%v) = %q, want %q", in, got, want)
		}
	}
	if got := fmtRatio(3, 2); got != "1.50×" {
		t.Errorf("fmtRatio = %q", got)
	}
	if got := tickLabel(25000); got != "25k" {
		t.Errorf("tickLabel = %q", got)
	}
}

func TestDescribeMachine(t *testing.T) {
	m := DescribeMachine(t.TempDir())
	if m.Cores < 1 || m.Go == "" {
		t.Fatalf("machine %+v", m)
	}
	if m.String() == "" {
		t.Fatal("empty description")
	}
}

// withCPU gives every result of r CPU figures: servers 100 µs/op × the
// system's index + 1, client 20 µs/op; etcd's servers could not be read.
func withCPU(r *Report) *Report {
	idx := map[string]int{"paxlock": 0, "redis": 1, "etcd": 2, "zk": 3}
	for i := range r.Results {
		res := &r.Results[i]
		if !res.Supported {
			continue
		}
		server := 100 * float64(idx[res.System]+1)
		c := &load.CPU{ServerProcs: 3, ServerUsPerOp: server, ClientUsPerOp: 20, TotalUsPerOp: server + 20,
			ServerCores: 1.2, ClientCores: 0.3}
		if res.System == "etcd" {
			c = &load.CPU{ServerNote: "pid file: open /p/etcd/m1.pid: no such file or directory", ClientUsPerOp: 20, ClientCores: 0.3}
		}
		if res.System == "paxlock" {
			c.SetCommands((load.Caps{CommandsPerLock: 2}).CommandsPerOp(res.Scenario))
		}
		res.CPU = c
	}
	r.IdleCPU = []load.IdleCPU{
		{System: "paxlock", Seconds: 3, ServerProcs: 3, ServerCores: 0.045, ClientCores: 0.004},
		{System: "etcd", Seconds: 3, ServerNote: "pid file: open /p/etcd/m1.pid: no such file or directory", ClientCores: 0.004},
	}
	return r
}

func TestMarkdownCPU(t *testing.T) {
	md := withCPU(fixture(true)).Markdown(nil)
	for _, want := range []string{
		// summary: total (servers + client), ratio on the total
		"|  | CPU µs/op: total (servers + client) | 120 (100 + 20.0) | 220 (200 + 20.0) | n/a (client 20.0) | 420 (400 + 20.0) | 0.55× | n/a | 0.29× |",
		// per server process: the servers' figure over 3 processes each
		"|  | servers' CPU µs/op per server process | 33.3 (3 procs) | 66.7 (3 procs) | — | 133 (3 procs) | 0.50× | n/a | 0.25× |",
		// paxlock's 120 µs per op over 2 commands, uncontended only
		"|  | CPU µs per replicated command | 60.0 (2 per op) | — | — | — |",
		"- etcd, uncontended 64w: servers' CPU n/a: pid file: open /p/etcd/m1.pid",
		// detail columns
		"CPU µs/op servers / client / total | CPU cores servers / client |",
		"| 0 | 100 / 20.0 / 120 | 1.20 / 0.30 |",
		"| n/a / 20.0 / n/a | n/a / 0.30 |",
		"paxlock commits 2 replicated commands per op: 60.0 µs of CPU per command (servers 50.0 + client 10.0).",
		"etcd servers n/a (pid file: open",
		"CPU measured over: paxlock 3 server processes, Redis 3 server processes,",
		// sweep
		"| workers | paxlock | Redis | etcd | ZooKeeper | paxlock µs per command |",
		"| 64 | 120 (100 + 20.0) | 220 (200 + 20.0) | n/a (client 20.0) | 420 (400 + 20.0) | 60.0 |",
		// idle
		"| paxlock | 3 | 0.045 |",
		"| etcd | n/a | n/a: pid file: open",
		"every system's client (connections, keep-alives, timers): 0.004 cores",
		"- CPU: at the start and at the end of every measured window",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	// contended: no per-command figure for paxlock (grants ride on releases)
	if i := strings.Index(md, "| contended, 64w |"); i < 0 || strings.Contains(md[i:strings.Index(md[i:], "\n\n")+i], "per op)") {
		t.Error("per-command figure in a hot-key scenario")
	}
	checkTables(t, md)

	// Without CPU figures, no CPU rows, columns or method paragraph.
	plain := fixture(true).Markdown(nil)
	if strings.Contains(plain, "CPU µs") || strings.Contains(plain, "- CPU:") {
		t.Error("CPU rendering without CPU figures")
	}
}

func TestCPUChart(t *testing.T) {
	charts := withCPU(fixture(true)).Charts()
	var cpu *Chart
	for i := range charts {
		if charts[i].File == "cpu-per-op-vs-workers.svg" {
			cpu = &charts[i].Chart
		}
	}
	if cpu == nil {
		t.Fatal("no CPU chart")
	}
	if !cpu.XLog || !cpu.YLog {
		t.Error("CPU chart axes not logarithmic")
	}
	points := map[string]int{}
	for _, s := range cpu.Series {
		points[s.Name] = len(s.Points)
	}
	// etcd's servers were not measured: no point; the others at 1 and 64 workers.
	if points["paxlock"] != 2 || points["Redis"] != 2 || points["ZooKeeper"] != 2 || points["etcd"] != 0 {
		t.Errorf("points per series %v", points)
	}
	svg := string(cpu.SVG())
	for _, name := range []string{">paxlock<", ">Redis<", ">ZooKeeper<"} {
		if !strings.Contains(svg, name) {
			t.Errorf("legend lacks %s", name)
		}
	}
	for _, c := range fixture(true).Charts() {
		if c.File == "cpu-per-op-vs-workers.svg" {
			t.Error("CPU chart without CPU figures")
		}
	}
}

func TestThroughputChartHasEverySystem(t *testing.T) {
	for _, c := range fixture(true).Charts() {
		if c.File != "throughput-vs-workers.svg" {
			continue
		}
		if !c.Chart.XLog {
			t.Error("throughput chart's x axis is not logarithmic")
		}
		svg := string(c.Chart.SVG())
		for _, name := range []string{">paxlock<", ">Redis<", ">etcd<", ">ZooKeeper<"} {
			if !strings.Contains(svg, name) {
				t.Errorf("legend lacks %s", name)
			}
		}
		if n := strings.Count(svg, "<polyline"); n != 4 {
			t.Errorf("%d lines, want 4", n)
		}
		return
	}
	t.Fatal("no throughput chart")
}

func TestFmtCPU(t *testing.T) {
	for in, want := range map[float64]string{1234.4: "1,234", 123.4: "123", 12.34: "12.3", 1.234: "1.23", 0: "0.00"} {
		if got := fmtUs(in); got != want {
			t.Errorf("fmtUs(%v) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[float64]string{1.234: "1.23", 0.004: "0.004", 0: "0.00"} {
		if got := fmtCores(in); got != want {
			t.Errorf("fmtCores(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestMarkdownCPUBudget(t *testing.T) {
	r := withCPU(fixture(true))
	if strings.Contains(r.Markdown(nil), "Equal machines") {
		t.Fatal("equal-machines heading without a budget")
	}
	r.CPUBudget = &CPUBudget{Cores: 0.5, PeriodMs: 20, Mechanism: "cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us",
		Procs: map[string]int{"paxlock": 3, "redis": 1}, ThrottledPeriods: map[string]uint64{"paxlock": 812, "redis": 0}}
	md := r.Markdown(nil)
	want := "**Equal machines:** every server process held to 0.5 core (10 ms of CPU per 20 ms, cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us), " +
		"as if each ran on a machine of its own; the load generator outside the budgets. " +
		"Processes limited: paxlock 3, throttled in 812 periods; redis 1, throttled in 0 periods."
	if !strings.Contains(md, want) {
		t.Errorf("markdown lacks %q", want)
	}
}
