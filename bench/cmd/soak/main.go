// Command soak loads a paxlock cluster continuously for a long time (30
// minutes by default) and records every minute its throughput, tail
// latency, servers' CPU per op, memory, data directory and storage
// metrics, with Redis run for a short window every few minutes as a
// reference for the machine's own drift. make bench-soak starts the
// servers and runs it.
//
//	soak -duration 30m -interval 1m -workers 64 -out results/soak
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/paxlock/paxlock/bench/load"
	"github.com/paxlock/paxlock/bench/peers"
	"github.com/paxlock/paxlock/bench/proccpu"
	"github.com/paxlock/paxlock/bench/report"
	"github.com/paxlock/paxlock/bench/soak"
)

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err := run(); err != nil {
		slog.Error("soak failed", "err", err)
		os.Exit(1)
	}
}

type flags struct {
	duration, interval, baseDur, ttl, warmup *time.Duration
	workers, keys, baseEvery                 *int
	scenario, baseline, out, peersDir        *string
	runDir, metrics, secret                  *string
}

func parseFlags() *flags {
	tmp := os.Getenv("PEERS_DIR")
	if tmp == "" {
		tmp = filepath.Join(os.TempDir(), "paxlock-bench-peers")
	}
	f := &flags{
		duration:  flag.Duration("duration", 30*time.Minute, "how long paxlock is loaded (baseline windows not counted)"),
		interval:  flag.Duration("interval", time.Minute, "one point of the record"),
		warmup:    flag.Duration("warmup", 3*time.Second, "unmeasured warm-up before the first interval"),
		ttl:       flag.Duration("ttl", 10*time.Second, "lock TTL"),
		workers:   flag.Int("workers", 64, "concurrent workers"),
		keys:      flag.Int("keys", 16, "hot keys (contended)"),
		scenario:  flag.String("scenario", "uncontended", "uncontended or contended"),
		baseline:  flag.String("baseline", "redis", "reference system run between intervals (\"\": none)"),
		baseEvery: flag.Int("baseline-every", 5, "intervals between baseline windows"),
		baseDur:   flag.Duration("baseline-duration", 15*time.Second, "measured time of a baseline window"),
		out:       flag.String("out", "results/soak", "directory for soak.md, soak.json and the plots"),
		peersDir:  flag.String("peers-dir", tmp, "bench/scripts/peers.sh's PEERS_DIR (pid files)"),
		runDir:    flag.String("paxlock-rundir", "", "the paxlock cluster's RUNDIR (default <peers-dir>/paxlock)"),
		metrics:   flag.String("metrics", "https://127.0.0.1:7301/metrics,https://127.0.0.1:7302/metrics,https://127.0.0.1:7303/metrics", "the nodes' /metrics URLs (\"\": none)"),
		secret:    flag.String("paxlock-secret", "", "namespace secret (default: PAXLOCK_SECRET, else scripts/cluster.sh's)"),
	}
	flag.Parse()
	if *f.runDir == "" {
		*f.runDir = filepath.Join(*f.peersDir, "paxlock")
	}
	return f
}

func run() error {
	f := parseFlags()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	sc := load.Scenario{Name: *f.scenario, Kind: load.Kind(*f.scenario), Workers: *f.workers, Duration: *f.interval,
		Warmup: *f.warmup, TTL: *f.ttl, AcquireTimeout: 10 * time.Second, Seed: load.RandomSeed()}
	if sc.Kind == load.Contended {
		sc.Keys = *f.keys
	}
	if err := sc.Validate(); err != nil {
		return err
	}
	pcfg := peers.DefaultConfig()
	pcfg.MaxWorkers, pcfg.TTL = *f.workers, *f.ttl
	if s := firstOf(*f.secret, os.Getenv("PAXLOCK_SECRET")); s != "" {
		pcfg.PaxlockSecret = s
	}
	cfg := soak.Config{Scenario: sc, Total: *f.duration, BaselineEvery: *f.baseEvery, BaselineDuration: *f.baseDur}
	dirs := proccpu.Dirs{Peers: *f.peersDir, Paxlock: *f.runDir}
	lk, err := peers.Open(ctx, "paxlock", pcfg)
	if err != nil {
		return fmt.Errorf("paxlock: %w", err)
	}
	defer func() { _ = lk.Close() }()
	cfg.Locker = lk
	cfg.Meter, _ = proccpu.ForSystem("paxlock", dirs)
	probe, err := nodeProbe(f)
	if err != nil {
		return err
	}
	cfg.Probe = probe
	if *f.baseline != "" {
		bl, err := peers.Open(ctx, *f.baseline, pcfg)
		if err != nil {
			return fmt.Errorf("baseline %s: %w", *f.baseline, err)
		}
		defer func() { _ = bl.Close() }()
		cfg.Baseline = bl
		cfg.BaselineMeter, _ = proccpu.ForSystem(*f.baseline, dirs)
	}
	started := time.Now()
	cfg.OnPoint = func(p soak.Point) {
		slog.Info("point", "minute", fmt.Sprintf("%.1f", p.Minute()), "system", p.System,
			"ops_per_sec", int(p.OpsPerSec), "p99_ms", fmt.Sprintf("%.2f", p.P99Ms),
			"cpu_us_per_op", fmt.Sprintf("%.0f", p.ServerCPUPerOpUs), "errors", p.Errors)
	}
	slog.Info("soak", "duration", *f.duration, "interval", *f.interval, "workers", *f.workers, "scenario", sc.Kind,
		"baseline", *f.baseline, "machine", report.DescribeMachine(*f.peersDir).String())
	pts, runErr := soak.Run(ctx, cfg)
	setup := fmt.Sprintf("`soak %s`, started %s on %s; load average %s at the end. Each point is one %v interval of %d workers (%s); %s runs for %v every %d intervals.",
		strings.Join(os.Args[1:], " "), started.UTC().Format(time.RFC3339), report.DescribeMachine(*f.peersDir), report.LoadAvg(),
		*f.interval, *f.workers, sc.Kind, report.DisplayName(firstOf(*f.baseline, "no baseline")), *f.baseDur, *f.baseEvery)
	if err := write(*f.out, setup, pts); err != nil {
		return errors.Join(runErr, err)
	}
	return runErr
}

// nodeProbe reads the cluster of bench/scripts/paxlock.sh: its pid
// files, data directories and the nodes' metrics over TLS with the
// development CA.
func nodeProbe(f *flags) (*soak.NodeProbe, error) {
	p := &soak.NodeProbe{}
	for i := 1; i <= proccpu.PaxlockNodes; i++ {
		p.PIDFiles = append(p.PIDFiles, filepath.Join(*f.runDir, fmt.Sprintf("n%d.pid", i)))
		p.DataDirs = append(p.DataDirs, filepath.Join(*f.runDir, "data", fmt.Sprintf("n%d", i)))
	}
	if *f.metrics == "" {
		return p, nil
	}
	p.MetricsURLs = strings.Split(*f.metrics, ",")
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca, err := os.ReadFile(filepath.Join(*f.runDir, "certs", "ca.crt")); err == nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, errors.New("the cluster's ca.crt holds no certificate")
		}
		tc.RootCAs = pool
	}
	if tok, err := os.ReadFile(filepath.Join(*f.runDir, "certs", "admin.token")); err == nil {
		p.Token = strings.TrimSpace(string(tok))
	}
	p.Client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	return p, nil
}

// write puts soak.md, soak.json and the plots into dir.
func write(dir, setup string, pts []soak.Point) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(struct {
		Setup   string       `json:"setup"`
		Summary soak.Summary `json:"summary"`
		Points  []soak.Point `json:"points"`
	}{setup, soak.Summarize(pts), pts}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "soak.json"), js, 0o644); err != nil {
		return err
	}
	md := soak.Markdown("paxlock soak", setup, pts)
	for _, c := range soak.Charts("paxlock soak", pts) {
		if err := os.WriteFile(filepath.Join(dir, c.File), c.Chart.SVG(), 0o644); err != nil {
			return err
		}
		md += fmt.Sprintf("\n![%s](%s)\n", c.Chart.Title, c.File)
	}
	if err := os.WriteFile(filepath.Join(dir, "soak.md"), []byte(md), 0o644); err != nil {
		return err
	}
	slog.Info("wrote", "dir", dir)
	return nil
}

func firstOf(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}
