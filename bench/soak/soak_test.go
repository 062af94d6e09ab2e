package soak

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/bench/load"
	"github.com/paxlock/paxlock/bench/memlock"
)

type fakeProbe struct{ n int }

func (f *fakeProbe) Sample(context.Context) (NodeStats, error) {
	f.n++
	return NodeStats{RSSBytes: int64(f.n) << 20, Storage: map[string]float64{"l0_files": float64(f.n)}}, nil
}

func TestRunRecordsEveryIntervalAndInterleavesTheBaseline(t *testing.T) {
	sys, base := memlock.New(memlock.Options{}), memlock.New(memlock.Options{})
	probe := &fakeProbe{}
	var seen int
	sc := load.Scenario{Name: "uncontended", Kind: load.Uncontended, Workers: 2, Duration: 100 * time.Millisecond,
		TTL: time.Second, AcquireTimeout: time.Second, Seed: 1}
	pts, err := Run(context.Background(), Config{
		Locker: sys, Probe: probe, Scenario: sc, Total: 400 * time.Millisecond,
		Baseline: base, BaselineEvery: 2, BaselineDuration: 50 * time.Millisecond,
		OnPoint: func(Point) { seen++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	// baseline, 2 intervals, baseline, 2 intervals, baseline
	want := []bool{true, false, false, true, false, false, true}
	if len(pts) != len(want) || seen != len(pts) {
		t.Fatalf("got %d points (%d told), want %d: %+v", len(pts), seen, len(want), pts)
	}
	for i, p := range pts {
		if p.Baseline != want[i] {
			t.Errorf("point %d: baseline %v, want %v", i, p.Baseline, want[i])
		}
		if p.OpsPerSec <= 0 {
			t.Errorf("point %d: no throughput", i)
		}
		if i > 0 && p.At < pts[i-1].At {
			t.Errorf("point %d ends before point %d", i, i-1)
		}
		if p.Baseline != (p.Nodes == nil) {
			t.Errorf("point %d: probe read %v for a baseline=%v point", i, p.Nodes != nil, p.Baseline)
		}
	}
	if probe.n != 4 {
		t.Errorf("probe read %d times, want 4", probe.n)
	}
}

func TestRunRefusesAnEmptySoak(t *testing.T) {
	if _, err := Run(context.Background(), Config{}); err == nil {
		t.Fatal("a soak without a system ran")
	}
}

func TestSummarizeComparesTheFirstAndLastWindows(t *testing.T) {
	var pts []Point
	for m := 1; m <= 30; m++ {
		ops := 1000.0
		if m > 20 {
			ops = 850
		}
		pts = append(pts, Point{System: "paxlock", At: time.Duration(m) * time.Minute, Window: time.Minute, OpsPerSec: ops, P99Ms: 2})
		if m%5 == 0 {
			pts = append(pts, Point{System: "redis", Baseline: true, At: time.Duration(m)*time.Minute + time.Second, Window: 15 * time.Second, OpsPerSec: 3000})
		}
	}
	s := Summarize(pts)
	if s.First != 1000 || s.Last != 850 {
		t.Fatalf("first %v last %v, want 1000 and 850", s.First, s.Last)
	}
	if s.Met {
		t.Errorf("a 15%% fall met the 10%% target")
	}
	if s.BaseRatio != 1 {
		t.Errorf("baseline ratio %v, want 1", s.BaseRatio)
	}
	md := Markdown("t", "setup", pts)
	if !strings.Contains(md, "85%") || !strings.Contains(md, "not met") {
		t.Errorf("markdown does not state the ratio and verdict:\n%s", md)
	}
	if n := len(Charts("t", pts)); n != 2 {
		t.Errorf("%d charts, want 2", n)
	}
}

func TestScrapeSumsTheRecordedFamilies(t *testing.T) {
	text := `# HELP paxlock_storage_level_files Files per level.
# TYPE paxlock_storage_level_files gauge
paxlock_storage_level_files{level="0"} 3
paxlock_storage_level_files{level="6"} 40
paxlock_storage_wal_bytes 1.048576e+06
paxlock_storage_compaction_debt_bytes 0
paxlock_unrelated 7
`
	m, err := Scrape(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if m["l0_files"] != 3 || m["wal_bytes"] != 1<<20 || len(m) != 3 {
		t.Fatalf("scraped %v", m)
	}
	if _, err := Scrape(strings.NewReader("paxlock_storage_wal_bytes x\n")); err == nil {
		t.Error("a malformed value was accepted")
	}
}

func TestNodeProbeReadsMemoryAndDisk(t *testing.T) {
	dir := t.TempDir()
	proc := filepath.Join(dir, "proc")
	must(t, os.MkdirAll(filepath.Join(proc, "42"), 0o755))
	must(t, os.WriteFile(filepath.Join(proc, "42", "status"), []byte("Name:\tpaxlockd\nVmRSS:\t  2048 kB\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "n1.pid"), []byte("42\n"), 0o644))
	data := filepath.Join(dir, "data")
	must(t, os.MkdirAll(data, 0o755))
	must(t, os.WriteFile(filepath.Join(data, "000001.log"), make([]byte, 64<<10), 0o644))
	p := &NodeProbe{PIDFiles: []string{filepath.Join(dir, "n1.pid")}, DataDirs: []string{data}, Proc: proc}
	st, err := p.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.RSSBytes != 2048<<10 {
		t.Errorf("RSS %d, want %d", st.RSSBytes, 2048<<10)
	}
	if st.DataBytes < 64<<10 {
		t.Errorf("data %d bytes, want at least 64 KiB", st.DataBytes)
	}
	p.PIDFiles = append(p.PIDFiles, filepath.Join(dir, "missing.pid"))
	if _, err := p.Sample(context.Background()); err == nil {
		t.Error("a missing pid file was not reported")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
