package soak

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// NodeProbe reads a cluster's server processes from outside: resident
// memory from /proc, the data directories' size from the file system
// (blocks allocated, as du counts them: preallocated WAL space counts),
// and storage-engine metrics from each node's Prometheus endpoint.
type NodeProbe struct {
	// PIDFiles hold the server processes' pids.
	PIDFiles []string
	// DataDirs are the nodes' data directories.
	DataDirs []string
	// MetricsURLs are the nodes' /metrics addresses; Client fetches them
	// (nil: http.DefaultClient) with Token as a bearer token if set.
	MetricsURLs []string
	Client      *http.Client
	Token       string
	// Proc is the proc file system's mount point; "" means /proc.
	Proc string
}

// Sample implements Probe. It reads what it can and reports the rest in
// the error, so a node that is down for a moment costs one field, not the
// point.
func (p *NodeProbe) Sample(ctx context.Context) (NodeStats, error) {
	var st NodeStats
	var errs []error
	for _, f := range p.PIDFiles {
		n, err := p.rss(f)
		if err != nil {
			errs = append(errs, err)
		}
		st.RSSBytes += n
	}
	for _, d := range p.DataDirs {
		n, err := diskUsage(d)
		if err != nil {
			errs = append(errs, err)
		}
		st.DataBytes += n
	}
	for _, u := range p.MetricsURLs {
		m, err := p.scrape(ctx, u)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.Storage == nil {
			st.Storage = map[string]float64{}
		}
		for k, v := range m {
			st.Storage[k] += v
		}
	}
	return st, errors.Join(errs...)
}

// rss reads VmRSS of the process whose pid is in pidFile.
func (p *NodeProbe) rss(pidFile string) (int64, error) {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", pidFile, err)
	}
	proc := p.Proc
	if proc == "" {
		proc = "/proc"
	}
	status, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	return parseRSS(string(status))
}

// parseRSS finds "VmRSS: N kB" in a /proc/<pid>/status text.
func parseRSS(status string) (int64, error) {
	for line := range strings.Lines(status) {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			break
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			break
		}
		return kb << 10, nil
	}
	return 0, errors.New("no VmRSS line")
}

// diskUsage is the space the files under dir take on disk.
func diskUsage(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking: a compaction's input
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil //nolint:nilerr // removed while walking
		}
		if s, ok := info.Sys().(*syscall.Stat_t); ok {
			n += s.Blocks * 512
		} else {
			n += info.Size()
		}
		return nil
	})
	return n, err
}

func (p *NodeProbe) scrape(ctx context.Context, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if p.Token != "" {
		req.Header.Set("Authorization", "Bearer "+p.Token)
	}
	c := p.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return Scrape(resp.Body)
}

// scraped maps the metric families the soak records to the names its
// points use; a family with a label condition counts only the series
// with that label.
var scraped = []struct{ family, label, name string }{
	{"paxlock_storage_level_files", `level="0"`, "l0_files"},
	{"paxlock_storage_compaction_debt_bytes", "", "compaction_debt_bytes"},
	{"paxlock_storage_compactions_total", "", "compactions"},
	{"paxlock_storage_flushes_total", "", "flushes"},
	{"paxlock_storage_memtable_bytes", "", "memtable_bytes"},
	{"paxlock_storage_compacted_bytes_total", "", "compacted_bytes"},
	{"paxlock_storage_wal_written_bytes_total", "", "wal_written_bytes"},
	{"paxlock_storage_wal_files", "", "wal_files"},
	{"paxlock_storage_wal_bytes", "", "wal_bytes"},
	{"paxlock_storage_level_bytes", "", "sstable_bytes"},
	{"go_memstats_heap_inuse_bytes", "", "heap_inuse_bytes"},
	{"go_goroutines", "", "goroutines"},
	{"paxlock_locks_held", "", "locks_held"},
}

// Scrape reads a Prometheus text exposition and returns the families the
// soak records, each summed over its series.
func Scrape(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		series, val := line[:sp], line[sp+1:]
		fam, labels, _ := strings.Cut(series, "{")
		for _, s := range scraped {
			if fam != s.family || (s.label != "" && !strings.Contains(labels, s.label)) {
				continue
			}
			v, err := strconv.ParseFloat(val, 64)
			if err != nil {
				return nil, fmt.Errorf("metric %s: %w", series, err)
			}
			out[s.name] += v
		}
	}
	return out, sc.Err()
}
