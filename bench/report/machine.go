package report

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// Machine describes the computer a run used, so numbers are never read
// without their conditions.
type Machine struct {
	CPU       string  `json:"cpu"`
	Cores     int     `json:"cores"`
	MemoryGiB float64 `json:"memory_gib"`
	Disk      string  `json:"disk"`
	Kernel    string  `json:"kernel"`
	OS        string  `json:"os"`
	Go        string  `json:"go"`
}

// String is a one-line summary.
func (m Machine) String() string {
	return fmt.Sprintf("%d cores (%s), %.1f GiB RAM, disk %s, Linux %s, %s, %s",
		m.Cores, m.CPU, m.MemoryGiB, m.Disk, m.Kernel, m.OS, m.Go)
}

// DescribeMachine reads /proc and /sys; dataDir is where the servers keep
// their data, whose disk is described.
func DescribeMachine(dataDir string) Machine {
	m := Machine{
		CPU:    "unknown CPU",
		Cores:  runtime.NumCPU(),
		Disk:   "unknown",
		Kernel: strings.TrimSpace(readFile("/proc/sys/kernel/osrelease")),
		OS:     runtime.GOOS,
		Go:     runtime.Version(),
	}
	if v := procField("/proc/cpuinfo", "model name"); v != "" {
		m.CPU = strings.Join(strings.Fields(v), " ")
	}
	if v := procField("/proc/meminfo", "MemTotal"); v != "" {
		if kb, err := strconv.ParseFloat(strings.Fields(v)[0], 64); err == nil {
			m.MemoryGiB = kb / (1 << 20)
		}
	}
	for _, line := range strings.Split(readFile("/etc/os-release"), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			m.OS = strings.Trim(v, `"`)
		}
	}
	m.Disk = describeDisk(dataDir)
	return m
}

// LoadAvg returns the 1, 5 and 15 minute load averages ("0.52 0.61 0.70"),
// or "" where /proc/loadavg is missing.
func LoadAvg() string {
	f := strings.Fields(readFile("/proc/loadavg"))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func readFile(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return string(b)
}

// procField returns the value of the first "name: value" line of a /proc file.
func procField(path, name string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }() // read-only
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// describeDisk names the filesystem holding dir: device, type, size, and
// whether the block device says it is rotational.
func describeDisk(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	var dev, mnt, fstype string
	for _, line := range strings.Split(readFile("/proc/mounts"), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		if (abs == f[1] || strings.HasPrefix(abs, strings.TrimSuffix(f[1], "/")+"/")) && len(f[1]) >= len(mnt) {
			dev, mnt, fstype = f[0], f[1], f[2]
		}
	}
	if mnt == "" {
		return "unknown"
	}
	desc := fmt.Sprintf("%s %s on %s", fstype, dev, mnt)
	var st syscall.Statfs_t
	if syscall.Statfs(abs, &st) == nil {
		desc += fmt.Sprintf(", %.0f GiB", float64(st.Blocks)*float64(st.Bsize)/(1<<30))
	}
	if name := strings.TrimPrefix(dev, "/dev/"); name != dev {
		rot := strings.TrimSpace(readFile("/sys/class/block/" + name + "/queue/rotational"))
		if rot == "" { // a partition: ask its disk
			if link, err := filepath.EvalSymlinks("/sys/class/block/" + name); err == nil {
				rot = strings.TrimSpace(readFile(filepath.Join(filepath.Dir(link), "queue/rotational")))
			}
		}
		switch rot {
		case "0":
			desc += ", kernel reports non-rotational"
		case "1":
			desc += ", kernel reports rotational"
		}
	}
	return desc
}
