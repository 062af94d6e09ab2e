// Package proccpu reads the CPU time of the benchmark's server processes
// from /proc and of the load generator itself from getrusage, and finds the
// servers through the pid files that bench/scripts/paxlock.sh (the
// repository's scripts/cluster.sh) and bench/scripts/peers.sh write. A Meter
// is the load.CPUMeter of one system.
package proccpu

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paxlock/paxlock/bench/load"
)

// Stat is what /proc/<pid>/stat says about a process's CPU time. The
// times are the whole process's (every thread, living or exited), in clock
// ticks (see ClockTicks).
type Stat struct {
	PID   int
	Comm  string // the executable's name, at most 15 bytes
	UTime uint64 // user time
	STime uint64 // system time
	Start uint64 // start time after boot, identifies the process with PID
}

// ErrBadStat is wrapped by ParseStat's errors.
var ErrBadStat = errors.New("malformed /proc/<pid>/stat")

// ParseStat parses the contents of /proc/<pid>/stat. The name field is in
// parentheses and may itself hold spaces and parentheses, so the fields
// after it are counted from the last ')'.
func ParseStat(b []byte) (Stat, error) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return Stat{}, fmt.Errorf("%w: no (comm)", ErrBadStat)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return Stat{}, fmt.Errorf("%w: pid: %w", ErrBadStat, err)
	}
	// Fields after the name, numbered as in proc(5): state is field 3.
	rest := strings.Fields(string(b[end+1:]))
	field := func(n int) (uint64, error) {
		i := n - 3
		if i >= len(rest) {
			return 0, fmt.Errorf("%w: %d fields, want at least %d", ErrBadStat, len(rest)+2, n)
		}
		v, err := strconv.ParseUint(rest[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: field %d: %w", ErrBadStat, n, err)
		}
		return v, nil
	}
	s := Stat{PID: pid, Comm: string(b[open+1 : end])}
	if s.UTime, err = field(14); err != nil {
		return Stat{}, err
	}
	if s.STime, err = field(15); err != nil {
		return Stat{}, err
	}
	if s.Start, err = field(22); err != nil {
		return Stat{}, err
	}
	return s, nil
}

// CPU is the process's user + system time.
func (s Stat) CPU(ticksPerSecond int64) time.Duration {
	return ticksToDuration(s.UTime+s.STime, ticksPerSecond)
}

func ticksToDuration(ticks uint64, perSecond int64) time.Duration {
	if perSecond <= 0 {
		perSecond = defaultClockTicks
	}
	sec := ticks / uint64(perSecond)
	frac := ticks % uint64(perSecond)
	return time.Duration(sec)*time.Second + time.Duration(frac)*time.Second/time.Duration(perSecond)
}

// ReadStat reads and parses <procDir>/<pid>/stat.
func ReadStat(procDir string, pid int) (Stat, error) {
	b, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "stat"))
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(b)
}

// defaultClockTicks is USER_HZ on every Linux architecture Go supports.
const defaultClockTicks = 100

// atClockTick is AT_CLKTCK, the auxiliary vector entry the kernel passes
// every process with the unit of /proc's times (sysconf(_SC_CLK_TCK) reads
// it too).
const atClockTick = 17

// ClockTicks returns the clock ticks per second of /proc/<pid>/stat's times,
// as `getconf CLK_TCK` does: AT_CLKTCK from the auxiliary vector, else 100.
func ClockTicks() int64 {
	auxv, err := unix.Auxv()
	if err == nil {
		for _, kv := range auxv {
			if kv[0] == atClockTick && kv[1] > 0 {
				return int64(kv[1])
			}
		}
	}
	return defaultClockTicks
}

// SelfCPU is the user + system time of this process (every thread) so far,
// from getrusage(RUSAGE_SELF), which counts in microseconds rather than
// clock ticks.
func SelfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// Server is one server process of a system, found through its pid file.
type Server struct {
	// PIDFile holds the process's pid, as the start scripts write it.
	PIDFile string
	// Comm is the name /proc/<pid>/stat must show (e.g. "paxlockd"), so a
	// stale pid file whose pid now belongs to another program is noticed.
	Comm string
	// CmdlineHas, if set, must occur in /proc/<pid>/cmdline (ZooKeeper's
	// members are "java" processes; their main class tells them apart).
	CmdlineHas string
}

// Meter reads the CPU time of one system's server processes and of this
// process. It implements load.CPUMeter.
type Meter struct {
	Servers []Server
	// Proc is the proc file system's mount point; "" means /proc.
	Proc string
	// Ticks is /proc's clock ticks per second; 0 means ClockTicks().
	Ticks int64
	// Self reads this process's CPU time; nil means SelfCPU.
	Self func() (time.Duration, error)
}

// ReadCPU reads every server's CPU time and this process's. A server that
// cannot be found or read makes the sample's servers unknown, with the
// reason in ServerErr.
func (m *Meter) ReadCPU() load.CPUSample {
	s := load.CPUSample{At: time.Now()}
	self := m.Self
	if self == nil {
		self = SelfCPU
	}
	if c, err := self(); err == nil {
		s.Client = c
	}
	proc := m.Proc
	if proc == "" {
		proc = "/proc"
	}
	ticks := m.Ticks
	if ticks <= 0 {
		ticks = ClockTicks()
	}
	for _, srv := range m.Servers {
		st, err := srv.stat(proc)
		if err != nil {
			s.ServerErr = err.Error()
			s.Servers, s.Procs = 0, nil
			return s
		}
		s.Servers += st.CPU(ticks)
		s.Procs = append(s.Procs, load.ProcID{PID: st.PID, Start: st.Start})
	}
	return s
}

// ErrNotServer is wrapped when a pid file names a process that is gone or
// is not the expected program.
var ErrNotServer = errors.New("not the expected server process")

// stat finds the server's process and reads its stat.
func (srv Server) stat(proc string) (Stat, error) {
	b, err := os.ReadFile(srv.PIDFile)
	if err != nil {
		return Stat{}, fmt.Errorf("pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return Stat{}, fmt.Errorf("pid file %s holds %q, not a pid", srv.PIDFile, strings.TrimSpace(string(b)))
	}
	st, err := ReadStat(proc, pid)
	if errors.Is(err, os.ErrNotExist) {
		return Stat{}, fmt.Errorf("pid %d from %s: no such process: %w", pid, srv.PIDFile, ErrNotServer)
	}
	if err != nil {
		return Stat{}, fmt.Errorf("pid %d from %s: %w", pid, srv.PIDFile, err)
	}
	if srv.Comm != "" && st.Comm != srv.Comm {
		return Stat{}, fmt.Errorf("pid %d from %s is %q, not %s: %w", pid, srv.PIDFile, st.Comm, srv.Comm, ErrNotServer)
	}
	if srv.CmdlineHas != "" {
		cmd, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "cmdline"))
		if err != nil {
			return Stat{}, fmt.Errorf("pid %d from %s: %w", pid, srv.PIDFile, err)
		}
		if !bytes.Contains(cmd, []byte(srv.CmdlineHas)) {
			return Stat{}, fmt.Errorf("pid %d from %s does not run %s: %w", pid, srv.PIDFile, srv.CmdlineHas, ErrNotServer)
		}
	}
	return st, nil
}

// Dirs says where the start scripts keep their pid files.
type Dirs struct {
	// Peers is bench/scripts/peers.sh's $PEERS_DIR (redis/, etcd/, zk/).
	Peers string
	// Paxlock is the cluster's $RUNDIR (n1.pid … n3.pid):
	// bench/scripts/paxlock.sh uses $PEERS_DIR/paxlock.
	Paxlock string
}

// PaxlockNodes is the number of nodes scripts/cluster.sh starts.
const PaxlockNodes = 3

// ForSystem returns the meter of a system of the benchmark by its short
// name, with the servers the start scripts run for it: paxlock's three
// paxlockd nodes (whichever port the system calls them on), each Redis's one redis-server, etcd's three members and
// ZooKeeper's three java members. "mem" has no server process (the fake
// lives in the load generator). ok is false for an unknown name.
func ForSystem(name string, d Dirs) (m *Meter, ok bool) {
	var srv []Server
	switch name {
	case "paxlock", "paxlock-tls", "paxlock-lq", "paxlock-api":
		for i := 1; i <= PaxlockNodes; i++ {
			srv = append(srv, Server{PIDFile: filepath.Join(d.Paxlock, fmt.Sprintf("n%d.pid", i)), Comm: "paxlockd"})
		}
	case "redis":
		srv = []Server{{PIDFile: filepath.Join(d.Peers, "redis", "redis.pid"), Comm: "redis-server"}}
	case "redis-aof":
		srv = []Server{{PIDFile: filepath.Join(d.Peers, "redis-aof", "redis.pid"), Comm: "redis-server"}}
	case "etcd":
		for i := 1; i <= 3; i++ {
			srv = append(srv, Server{PIDFile: filepath.Join(d.Peers, "etcd", fmt.Sprintf("m%d.pid", i)), Comm: "etcd"})
		}
	case "zk", "zookeeper":
		for i := 1; i <= 3; i++ {
			srv = append(srv, Server{PIDFile: filepath.Join(d.Peers, "zk", fmt.Sprintf("zk%d.pid", i)), Comm: "java",
				CmdlineHas: "org.apache.zookeeper.server.quorum.QuorumPeerMain"})
		}
	case "mem":
	default:
		return nil, false
	}
	return &Meter{Servers: srv}, true
}
