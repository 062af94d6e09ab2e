// Package cpuquota gives benchmarked server processes equal CPU budgets
// with a cgroup CPU quota each, as if every node and every peer server ran
// on a machine of its own of that size: cgroup v1's cpu.cfs_quota_us and
// cpu.cfs_period_us, or cgroup v2's cpu.max. The load generator stays
// outside the budgets.
//
// A Controller makes one cgroup per process under a parent named
// ParentName in the cpu hierarchy, moves the process into it and, on
// Release, moves it back where it came from and removes the cgroup.
package cpuquota

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ParentName is the cgroup, below the cpu hierarchy's root, that holds
// the budgets' cgroups.
const ParentName = "paxlock-bench"

// ErrUnavailable is wrapped by Detect's error where no writable cgroup
// CPU controller is found.
var ErrUnavailable = errors.New("cpuquota: no writable cgroup CPU controller")

// ErrBadBudget is wrapped by Budget.Validate's errors.
var ErrBadBudget = errors.New("cpuquota: bad budget")

// Budget is a CPU budget: Cores of CPU time per wall second, granted in
// periods of Period (the scheduler throttles a process that spends
// Cores×Period within a period until the next one).
type Budget struct {
	Cores  float64
	Period time.Duration
}

// Quota is the CPU time the budget allows per period.
func (b Budget) Quota() time.Duration {
	return time.Duration(b.Cores * float64(b.Period))
}

// Validate checks the budget against the kernel's bounds: a period of 1 ms
// to 1 s and a quota of at least 1 ms.
func (b Budget) Validate() error {
	switch {
	case b.Cores <= 0:
		return fmt.Errorf("%w: %v cores, want > 0", ErrBadBudget, b.Cores)
	case b.Period < time.Millisecond || b.Period > time.Second:
		return fmt.Errorf("%w: period %v, want 1ms..1s", ErrBadBudget, b.Period)
	case b.Quota() < time.Millisecond:
		return fmt.Errorf("%w: quota %v per %v period, want >= 1ms (raise -cpu-period)", ErrBadBudget, b.Quota(), b.Period)
	}
	return nil
}

// String says the budget as "0.5 core (10ms per 20ms)".
func (b Budget) String() string {
	return fmt.Sprintf("%s core (%v per %v)", strconv.FormatFloat(b.Cores, 'f', -1, 64), b.Quota(), b.Period)
}

// Version is a cgroup hierarchy's version.
type Version int

// The cgroup versions a Controller drives.
const (
	V1 Version = 1
	V2 Version = 2
)

// Controller makes budget cgroups in one cpu hierarchy.
type Controller struct {
	// Version is the hierarchy's cgroup version.
	Version Version
	// Root is the hierarchy's mount point (v1: the cpu controller's).
	Root string
}

// Detect finds the cpu hierarchy from /proc/self/mountinfo (a v1 mount
// with the cpu controller, else the v2 mount whose cgroup.controllers
// lists cpu) and makes the parent cgroup, removing budget cgroups an
// earlier run left empty. It wraps ErrUnavailable where there is none it
// can write.
func Detect() (*Controller, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	c, err := FromMountinfo(mi, func(dir string) bool {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
		return err == nil && hasField(string(b), "cpu")
	})
	if err != nil {
		return nil, err
	}
	if err := c.prepare(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return c, nil
}

// FromMountinfo picks the cpu hierarchy from a mountinfo listing: the v1
// cgroup mount with the cpu option first, else a cgroup2 mount for which
// v2HasCPU says its controllers include cpu.
func FromMountinfo(mountinfo []byte, v2HasCPU func(dir string) bool) (*Controller, error) {
	var v2 []string
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		mnt := unescapeMount(f[4])
		switch g[0] {
		case "cgroup":
			if hasOption(g[2], "cpu") {
				return &Controller{Version: V1, Root: mnt}, nil
			}
		case "cgroup2":
			v2 = append(v2, mnt)
		}
	}
	for _, mnt := range v2 {
		if v2HasCPU(mnt) {
			return &Controller{Version: V2, Root: mnt}, nil
		}
	}
	return nil, fmt.Errorf("%w: no cgroup mount with the cpu controller in /proc/self/mountinfo", ErrUnavailable)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func hasOption(opts, want string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

func hasField(s, want string) bool {
	for _, f := range strings.Fields(s) {
		if f == want {
			return true
		}
	}
	return false
}

// parent is the parent cgroup's directory.
func (c *Controller) parent() string { return filepath.Join(c.Root, ParentName) }

// prepare makes the parent cgroup (on v2 with cpu enabled for its
// children) and removes the empty budget cgroups left in it.
func (c *Controller) prepare() error {
	if err := os.MkdirAll(c.parent(), 0o755); err != nil {
		return err
	}
	if c.Version == V2 {
		if err := writeFile(filepath.Join(c.Root, "cgroup.subtree_control"), "+cpu"); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(c.parent(), "cgroup.subtree_control"), "+cpu"); err != nil {
			return err
		}
	}
	stale, _ := os.ReadDir(c.parent())
	for _, e := range stale {
		if e.IsDir() {
			_ = os.Remove(filepath.Join(c.parent(), e.Name())) // fails, as it should, while a process is inside
		}
	}
	return nil
}

// Limit is one process held to a budget.
type Limit struct {
	c      *Controller
	dir    string
	pid    int
	origin string
}

// Apply puts the process pid (all its threads) into a cgroup of its own,
// named name under the parent, limited to b.
func (c *Controller) Apply(name string, pid int, b Budget) (*Limit, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	if strings.ContainsAny(name, "/\x00") || name == "" || name == "." || name == ".." {
		return nil, fmt.Errorf("cpuquota: bad cgroup name %q", name)
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, fmt.Errorf("cpuquota: process %d: %w", pid, err)
	}
	origin, err := CgroupPath(cg, c.Version)
	if err != nil {
		return nil, fmt.Errorf("cpuquota: process %d: %w", pid, err)
	}
	l := &Limit{c: c, dir: filepath.Join(c.parent(), name), pid: pid, origin: origin}
	if err := os.Mkdir(l.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cpuquota: %w", err)
	}
	if err := c.setBudget(l.dir, b); err != nil {
		_ = os.Remove(l.dir)
		return nil, err
	}
	if err := writeFile(filepath.Join(l.dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
		_ = os.Remove(l.dir)
		return nil, err
	}
	return l, nil
}

// setBudget writes b into the cgroup dir's CPU files. On v1 the period is
// written before the quota: the kernel refuses a quota that, with the old
// period, exceeds the parent's.
func (c *Controller) setBudget(dir string, b Budget) error {
	us := func(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }
	if c.Version == V1 {
		if err := writeFile(filepath.Join(dir, "cpu.cfs_period_us"), us(b.Period)); err != nil {
			return err
		}
		return writeFile(filepath.Join(dir, "cpu.cfs_quota_us"), us(b.Quota()))
	}
	return writeFile(filepath.Join(dir, "cpu.max"), us(b.Quota())+" "+us(b.Period))
}

// Throttled is how often and how long the kernel throttled the limited
// process for exceeding its budget (cpu.stat's nr_throttled and
// throttled_time, or throttled_usec on v2).
func (l *Limit) Throttled() (periods uint64, total time.Duration, err error) {
	b, err := os.ReadFile(filepath.Join(l.dir, "cpu.stat"))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		switch k {
		case "nr_throttled":
			periods = n
		case "throttled_time": // v1, ns
			total = time.Duration(n)
		case "throttled_usec": // v2
			total = time.Duration(n) * time.Microsecond
		}
	}
	return periods, total, nil
}

// Release moves the process back into the cgroup it came from and removes
// the budget's cgroup. A process that has exited needs no move.
func (l *Limit) Release() error {
	back := filepath.Join(l.c.Root, l.origin, "cgroup.procs")
	if err := writeFile(back, strconv.Itoa(l.pid)); err != nil && !errors.Is(err, errNoProcess) {
		return err
	}
	if err := os.Remove(l.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cpuquota: %w", err)
	}
	return nil
}

// errNoProcess is writeFile's error when the pid written has exited.
var errNoProcess = errors.New("cpuquota: no such process")

// CgroupPath is the process's cgroup in the hierarchy of version v, from
// the contents of /proc/<pid>/cgroup: v1's line listing the cpu
// controller, or v2's "0::" line.
func CgroupPath(procCgroup []byte, v Version) (string, error) {
	for _, line := range strings.Split(string(procCgroup), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if v == V2 && parts[0] == "0" && parts[1] == "" {
			return parts[2], nil
		}
		if v == V1 && hasOption(parts[1], "cpu") {
			return parts[2], nil
		}
	}
	return "", fmt.Errorf("cpuquota: no cgroup v%d cpu line in /proc/<pid>/cgroup", v)
}

// writeFile writes s into a cgroup control file (which must exist).
func writeFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("cpuquota: %w", err)
	}
	_, werr := f.WriteString(s)
	cerr := f.Close()
	if werr != nil {
		if strings.HasSuffix(path, "cgroup.procs") && errors.Is(werr, syscall.ESRCH) {
			return fmt.Errorf("%w: %s", errNoProcess, s)
		}
		return fmt.Errorf("cpuquota: write %q to %s: %w", s, path, werr)
	}
	if cerr != nil {
		return fmt.Errorf("cpuquota: %w", cerr)
	}
	return nil
}
