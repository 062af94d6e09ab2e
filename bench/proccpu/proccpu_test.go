package proccpu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/bench/load"
)

// statLine builds a /proc/<pid>/stat line with the given name and times;
// the other fields hold distinct numbers so that an off-by-one shows.
func statLine(pid int, comm string, utime, stime, start uint64) string {
	f := make([]string, 52-2) // fields 3..52
	for i := range f {
		f[i] = strconv.Itoa(1000 + i + 3)
	}
	f[0] = "S"
	f[14-3] = strconv.FormatUint(utime, 10)
	f[15-3] = strconv.FormatUint(stime, 10)
	f[22-3] = strconv.FormatUint(start, 10)
	return fmt.Sprintf("%d (%s) %s\n", pid, comm, strings.Join(f, " "))
}

func TestParseStat(t *testing.T) {
	for _, comm := range []string{"paxlockd", "redis-server", "a b", "x) (y", "((", ""} {
		s, err := ParseStat([]byte(statLine(4242, comm, 1234, 56, 987654)))
		if err != nil {
			t.Fatalf("comm %q: %v", comm, err)
		}
		if s.PID != 4242 || s.Comm != comm || s.UTime != 1234 || s.STime != 56 || s.Start != 987654 {
			t.Errorf("comm %q: parsed %+v", comm, s)
		}
	}
	// A real line of a kernel 6.x (java, 52 fields).
	real := "812 (java) S 1 811 811 0 -1 4194560 120117 0 3 0 2093 477 0 0 20 0 52 0 1530 4073508864 66712 18446744073709551615 94568367050752 94568367051568 140735722428544 0 0 0 0 0 16800975 0 0 0 17 1 0 0 0 0 0 94568367061104 94568367061776 94568374214656 140735722435425 140735722435860 140735722435860 140735722438618 0\n"
	s, err := ParseStat([]byte(real))
	if err != nil {
		t.Fatal(err)
	}
	if s.PID != 812 || s.Comm != "java" || s.UTime != 2093 || s.STime != 477 || s.Start != 1530 {
		t.Errorf("parsed %+v", s)
	}
	if got, want := s.CPU(100), 25700*time.Millisecond; got != want {
		t.Errorf("CPU = %v, want %v", got, want)
	}
	if got, want := s.CPU(250), 10280*time.Millisecond; got != want {
		t.Errorf("CPU at 250 ticks/s = %v, want %v", got, want)
	}
}

func TestParseStatRejectsGarbage(t *testing.T) {
	for _, in := range []string{
		"",
		"12 paxlockd S 1 2 3",
		"x (a) S 1",
		"12 (a) S 1 2 3 4 5 6 7 8 9 10", // too short
		strings.Replace(statLine(1, "a", 5, 6, 7), " 5 ", " five ", 1), // utime not a number
	} {
		if _, err := ParseStat([]byte(in)); !errors.Is(err, ErrBadStat) {
			t.Errorf("ParseStat(%q) err = %v, want ErrBadStat", in, err)
		}
	}
}

func TestReadStatOfThisProcess(t *testing.T) {
	s, err := ReadStat("/proc", os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if s.PID != os.Getpid() || s.Start == 0 || s.Comm == "" {
		t.Errorf("own stat %+v", s)
	}
	if tk := ClockTicks(); tk < 1 || tk > 10000 {
		t.Errorf("ClockTicks() = %d", tk)
	}
}

func TestSelfCPUGrows(t *testing.T) {
	start, err := SelfCPU()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	x := 1.0
	for {
		for i := 0; i < 1e6; i++ {
			x = x*1.0000001 + 1e-9
		}
		now, err := SelfCPU()
		if err != nil {
			t.Fatal(err)
		}
		if now-start >= time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30s of spinning added %v of CPU time (x=%v)", now-start, x)
		}
	}
}

// fakeProc is a directory laid out like /proc plus pid files.
type fakeProc struct {
	t    *testing.T
	root string
}

func newFakeProc(t *testing.T) *fakeProc {
	return &fakeProc{t: t, root: t.TempDir()}
}

func (f *fakeProc) proc(pid int, comm string, utime, stime, start uint64, cmdline string) {
	d := filepath.Join(f.root, "proc", strconv.Itoa(pid))
	if err := os.MkdirAll(d, 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "stat"), []byte(statLine(pid, comm, utime, stime, start)), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "cmdline"), []byte(strings.ReplaceAll(cmdline, " ", "\x00")), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeProc) pidFile(rel string, content string) string {
	p := filepath.Join(f.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fakeProc) meter(name string) *Meter {
	m, ok := ForSystem(name, Dirs{Peers: filepath.Join(f.root, "peers"), Paxlock: filepath.Join(f.root, "peers", "paxlock")})
	if !ok {
		f.t.Fatalf("no meter for %s", name)
	}
	m.Proc = filepath.Join(f.root, "proc")
	m.Ticks = 100
	m.Self = func() (time.Duration, error) { return 1500 * time.Millisecond, nil }
	return m
}

func TestMeterSumsTheServers(t *testing.T) {
	f := newFakeProc(t)
	for i, pid := range []int{101, 102, 103} {
		f.proc(pid, "paxlockd", uint64(100*(i+1)), 10, uint64(5000+i), "bin/paxlockd -config n.json")
		f.pidFile(fmt.Sprintf("peers/paxlock/n%d.pid", i+1), strconv.Itoa(pid)+"\n")
	}
	s := f.meter("paxlock").ReadCPU()
	if s.ServerErr != "" {
		t.Fatal(s.ServerErr)
	}
	// (100+10) + (200+10) + (300+10) ticks of 10 ms.
	if s.Servers != 6300*time.Millisecond || s.Client != 1500*time.Millisecond {
		t.Errorf("servers %v client %v", s.Servers, s.Client)
	}
	want := []load.ProcID{{PID: 101, Start: 5000}, {PID: 102, Start: 5001}, {PID: 103, Start: 5002}}
	if fmt.Sprint(s.Procs) != fmt.Sprint(want) {
		t.Errorf("procs %v, want %v", s.Procs, want)
	}
}

func TestMeterZooKeeperNeedsItsMainClass(t *testing.T) {
	f := newFakeProc(t)
	for i := 1; i <= 3; i++ {
		cmd := "java -Xmx512m -cp x org.apache.zookeeper.server.quorum.QuorumPeerMain zoo.cfg"
		if i == 2 {
			cmd = "java -jar something-else.jar"
		}
		f.proc(200+i, "java", 50, 50, 1, cmd)
		f.pidFile(fmt.Sprintf("peers/zk/zk%d.pid", i), strconv.Itoa(200+i))
	}
	s := f.meter("zk").ReadCPU()
	if !strings.Contains(s.ServerErr, "does not run org.apache.zookeeper.server.quorum.QuorumPeerMain") || s.Servers != 0 || s.Procs != nil {
		t.Errorf("sample %+v", s)
	}
	if s.Client != 1500*time.Millisecond {
		t.Errorf("client %v: the client must be read even when the servers are not", s.Client)
	}
}

func TestMeterSaysWhyServersAreUnknown(t *testing.T) {
	cases := []struct {
		name  string
		setup func(f *fakeProc)
		want  string
	}{
		{"no pid file", func(f *fakeProc) {}, "pid file: open "},
		{"garbage pid file", func(f *fakeProc) { f.pidFile("peers/redis/redis.pid", "oops") }, `holds "oops", not a pid`},
		{"process gone", func(f *fakeProc) { f.pidFile("peers/redis/redis.pid", "777") }, "pid 777 from "},
		{"pid reused by another program", func(f *fakeProc) {
			f.pidFile("peers/redis/redis.pid", "778")
			f.proc(778, "bash", 1, 1, 1, "bash")
		}, `is "bash", not redis-server`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeProc(t)
			c.setup(f)
			s := f.meter("redis").ReadCPU()
			if !strings.Contains(s.ServerErr, c.want) {
				t.Errorf("ServerErr %q, want it to contain %q", s.ServerErr, c.want)
			}
		})
	}
}

func TestMeterReadsARealProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	st, err := ReadStat("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	pf := filepath.Join(t.TempDir(), "me.pid")
	if err := os.WriteFile(pf, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	m := &Meter{Servers: []Server{{PIDFile: pf, Comm: st.Comm}}}
	s := m.ReadCPU()
	if s.ServerErr != "" || len(s.Procs) != 1 || s.Procs[0].PID != os.Getpid() {
		t.Errorf("sample %+v", s)
	}
	d := load.CPUBetween(s, m.ReadCPU())
	if d.ServerNote != "" || d.ServerProcs != 1 || d.ServerSeconds < 0 || d.ClientSeconds < 0 {
		t.Errorf("between two readings: %+v", d)
	}
}

func TestForSystem(t *testing.T) {
	d := Dirs{Peers: "/p", Paxlock: "/p/paxlock"}
	for name, want := range map[string][]string{
		"paxlock": {"/p/paxlock/n1.pid", "/p/paxlock/n2.pid", "/p/paxlock/n3.pid"},
		"redis":   {"/p/redis/redis.pid"},
		"etcd":    {"/p/etcd/m1.pid", "/p/etcd/m2.pid", "/p/etcd/m3.pid"},
		"zk":      {"/p/zk/zk1.pid", "/p/zk/zk2.pid", "/p/zk/zk3.pid"},
		"mem":     nil,
	} {
		m, ok := ForSystem(name, d)
		if !ok {
			t.Fatalf("%s: no meter", name)
		}
		var got []string
		for _, s := range m.Servers {
			got = append(got, s.PIDFile)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: pid files %v, want %v", name, got, want)
		}
	}
	if _, ok := ForSystem("consul", d); ok {
		t.Error("a meter for an unknown system")
	}
}
