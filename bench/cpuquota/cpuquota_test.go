package cpuquota_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/paxlock/paxlock/bench/cpuquota"
	"github.com/paxlock/paxlock/bench/proccpu"
)

func TestBudget(t *testing.T) {
	b := cpuquota.Budget{Cores: 0.5, Period: 20 * time.Millisecond}
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
	if b.Quota() != 10*time.Millisecond {
		t.Fatalf("quota %v, want 10ms", b.Quota())
	}
	if got, want := b.String(), "0.5 core (10ms per 20ms)"; got != want {
		t.Fatalf("String %q, want %q", got, want)
	}
	for _, bad := range []cpuquota.Budget{
		{Cores: 0, Period: 20 * time.Millisecond},
		{Cores: -1, Period: 20 * time.Millisecond},
		{Cores: 0.5, Period: 500 * time.Microsecond},
		{Cores: 0.5, Period: 2 * time.Second},
		{Cores: 0.01, Period: 20 * time.Millisecond}, // 200µs quota
	} {
		if err := bad.Validate(); !errors.Is(err, cpuquota.ErrBadBudget) {
			t.Errorf("%+v: Validate = %v, want ErrBadBudget", bad, err)
		}
	}
}

func TestFromMountinfo(t *testing.T) {
	v1 := []byte(`24 18 0:21 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
25 24 0:22 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
27 24 0:24 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
28 24 0:25 / /sys/fs/cgroup/cpuset rw,nosuid - cgroup cgroup rw,cpuset
`)
	c, err := cpuquota.FromMountinfo(v1, func(string) bool { return true })
	if err != nil || c.Version != cpuquota.V1 || c.Root != "/sys/fs/cgroup/cpu,cpuacct" {
		t.Fatalf("v1 hybrid: %+v, %v", c, err)
	}
	v2 := []byte(`30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
31 1 0:27 / /mnt/my\040cgroups rw - cgroup2 cgroup2 rw
`)
	c, err = cpuquota.FromMountinfo(v2, func(dir string) bool { return dir == "/mnt/my cgroups" })
	if err != nil || c.Version != cpuquota.V2 || c.Root != "/mnt/my cgroups" {
		t.Fatalf("v2 with escaped path: %+v, %v", c, err)
	}
	if _, err := cpuquota.FromMountinfo(v2, func(string) bool { return false }); !errors.Is(err, cpuquota.ErrUnavailable) {
		t.Fatalf("v2 without cpu: %v, want ErrUnavailable", err)
	}
	cpuset := []byte("28 24 0:25 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n")
	if _, err := cpuquota.FromMountinfo(cpuset, func(string) bool { return true }); !errors.Is(err, cpuquota.ErrUnavailable) {
		t.Fatalf("cpuset only: %v, want ErrUnavailable (cpuset is not cpu)", err)
	}
}

func TestCgroupPath(t *testing.T) {
	pc := []byte("9:name=systemd:/user.slice\n3:cpuset:/\n2:cpu,cpuacct:/bench/a\n0::/user.slice/session-1.scope\n")
	if p, err := cpuquota.CgroupPath(pc, cpuquota.V1); err != nil || p != "/bench/a" {
		t.Fatalf("v1: %q, %v", p, err)
	}
	if p, err := cpuquota.CgroupPath(pc, cpuquota.V2); err != nil || p != "/user.slice/session-1.scope" {
		t.Fatalf("v2: %q, %v", p, err)
	}
	if _, err := cpuquota.CgroupPath([]byte("3:cpuset:/\n"), cpuquota.V1); err == nil {
		t.Fatal("v1 without a cpu line: no error")
	}
}

// TestLimitHoldsBusyProcess limits a process that spins on every core it
// is given to 0.2 core and checks it got no more than that (with the
// kernel's slack of a period), then that Release removes the cgroup. A
// loaded machine gives the process less, never more, so the bound holds
// under load. It skips where cgroups are not writable.
func TestLimitHoldsBusyProcess(t *testing.T) {
	if os.Getenv("CPUQUOTA_SPIN") == "1" {
		for { //nolint:staticcheck // the child spins on purpose: it is the load the budget holds
		}
	}
	c, err := cpuquota.Detect()
	if err != nil {
		t.Skipf("no writable cgroup CPU controller: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLimitHoldsBusyProcess$")
	cmd.Env = append(os.Environ(), "CPUQUOTA_SPIN=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	b := cpuquota.Budget{Cores: 0.2, Period: 20 * time.Millisecond}
	name := "test-" + strconv.Itoa(pid)
	l, err := c.Apply(name, pid, b)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	cpu0, t0 := procCPU(t, pid), time.Now()
	time.Sleep(time.Second)
	cpu1, t1 := procCPU(t, pid), time.Now()
	used, wall := cpu1-cpu0, t1.Sub(t0)
	limit := time.Duration(float64(wall)*b.Cores*1.3) + 2*b.Quota() + 20*time.Millisecond // the clock tick's resolution
	t.Logf("spinning child used %v of CPU in %v under %v (bound %v)", used, wall.Round(time.Millisecond), b, limit)
	if used > limit {
		t.Fatalf("child used %v of CPU in %v, over the %v budget's bound %v", used, wall, b, limit)
	}
	if err := l.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := os.Stat(filepath.Join(c.Root, cpuquota.ParentName, name)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cgroup left after Release: %v", err)
	}
}

func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	st, err := proccpu.ParseStat(b)
	if err != nil {
		t.Fatal(err)
	}
	return st.CPU(proccpu.ClockTicks())
}
