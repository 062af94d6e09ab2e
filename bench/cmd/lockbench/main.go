// Command lockbench runs paxlock's lock benchmark against Redis, etcd and
// ZooKeeper (started by bench/scripts/paxlock.sh and peers.sh) and writes results.md,
// results.json and SVG plots.
//
//	lockbench -systems paxlock,redis,etcd,zk -scenarios uncontended,contended,sweep -repeats 3
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/paxlock/paxlock/bench/load"
	"github.com/paxlock/paxlock/bench/peers"
	"github.com/paxlock/paxlock/bench/proccpu"
	"github.com/paxlock/paxlock/bench/report"
)

func main() {
	if err := run(); err != nil {
		slog.Error("lockbench failed", "err", err)
		os.Exit(1)
	}
}

func run() error {
	def := peers.DefaultConfig()
	f := parseFlags(def)
	setLogging(*f.verbose)
	if *f.rerender != "" {
		return rerenderReport(*f.rerender, *f.out)
	}
	if *f.cpuProf != "" {
		stop, err := startCPUProfile(*f.cpuProf)
		if err != nil {
			return err
		}
		defer stop()
	}
	if *f.pprofAddr != "" {
		if err := servePprof(*f.pprofAddr); err != nil {
			return err
		}
	}
	scs, sweep, err := scenarios(f)
	if err != nil {
		return err
	}
	cfg := systemsConfig(def, f, sweep)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rep := &report.Report{
		Started: time.Now(),
		Command: "lockbench " + strings.Join(os.Args[1:], " "),
		Machine: report.DescribeMachine(*f.dataDir),
		Repeats: *f.repeats,

		LoadAvgStart: report.LoadAvg(),
	}
	slog.Info("machine", "desc", rep.Machine.String())

	lockers, err := openSystems(ctx, f, cfg, rep)
	defer func() {
		for _, lk := range lockers {
			_ = lk.Close()
		}
	}()
	if err != nil {
		return err
	}
	meters, err := cpuMeters(ctx, f, lockers, rep)
	if err != nil {
		return err
	}
	bs, err := applyBudgets(f, meters, lockers, rep)
	defer bs.release()
	switch {
	case errors.Is(err, errBudgetSkipped):
		return nil
	case err != nil:
		return err
	}
	results, err := runSuite(ctx, f, lockers, scs, sweep, meters)
	if err != nil {
		return err
	}
	bs.throttled(rep)
	return writeReport(rep, results, *f.out)
}

// flags are lockbench's command-line flags.
type flags struct {
	systems, scenarios                           *string
	workers                                      *int
	duration, warmup, ttl, hold                  *time.Duration
	keys, repeats                                *int
	acqTO                                        *time.Duration
	renews                                       *int
	readFrac                                     *float64
	sweepW                                       *string
	sweepDur, sweepWarm                          *time.Duration
	sweepRep                                     *int
	pauseFlag                                    *time.Duration
	seed                                         *uint64
	out, dataDir                                 *string
	cpuFlag                                      *bool
	paxRunDir                                    *string
	idle                                         *time.Duration
	skipDown, verbose                            *bool
	rerender, cpuProf, pprofAddr                 *string
	redisAddr, redisAOF                          *string
	redisPoll                                    *time.Duration
	etcdEPs, zkServers, paxReg, paxNS, paxSecret *string
	paxTLSReg, paxCA, paxAPI                     *string
	paxAPIGRPC                                   *bool
	paxAPIRoute                                  *bool
	cpuBudget                                    *float64
	cpuPeriod                                    *time.Duration
	cpuOptional                                  *bool
}

// parseFlags defines the flags, with the systems' addresses defaulting to
// def's, and parses the command line.
func parseFlags(def peers.Config) *flags {
	f := &flags{
		systems:   flag.String("systems", "paxlock,paxlock-tls,paxlock-api,redis,redis-aof,etcd,zk", "systems to compare, in report order: paxlock, paxlock-lq (client local queueing on), paxlock-tls (the same cluster through its TLS client listeners), paxlock-api (the same cluster through its nodes' Connect API), redis, redis-aof (Redis fsyncing every write), etcd, zk, mem (in-memory fake)"),
		scenarios: flag.String("scenarios", "uncontended,contended", "scenarios: uncontended, contended, renew, rw, sweep, or all"),
		workers:   flag.Int("workers", 64, "concurrent workers (each with its own session)"),
		duration:  flag.Duration("duration", 15*time.Second, "measured time per run"),
		warmup:    flag.Duration("warmup", 3*time.Second, "unmeasured warm-up before each run"),
		ttl:       flag.Duration("ttl", 10*time.Second, "lock TTL (session TTL for etcd and ZooKeeper)"),
		hold:      flag.Duration("hold", 0, "time a lock is held before release (contended, rw)"),
		keys:      flag.Int("keys", 16, "hot keys (contended, rw)"),
		repeats:   flag.Int("repeats", 1, "repeats of each scenario; the report shows min/median/max"),
		acqTO:     flag.Duration("acquire-timeout", 10*time.Second, "longest wait of one acquire; exceeding it is a timeout error"),
		renews:    flag.Int("renews", 4, "renews per op (renew)"),
		readFrac:  flag.Float64("read-fraction", 0.9, "share of read locks (rw)"),
		sweepW:    flag.String("sweep", "1,2,4,8,16,32,64,128,256", "worker counts of the sweep"),
		sweepDur:  flag.Duration("sweep-duration", 5*time.Second, "measured time per sweep point"),
		sweepWarm: flag.Duration("sweep-warmup", time.Second, "warm-up per sweep point"),
		sweepRep:  flag.Int("sweep-repeats", 1, "repeats of each sweep point"),
		pauseFlag: flag.Duration("pause", time.Second, "pause between runs"),
		seed:      flag.Uint64("seed", 0, "seed for key choices (0: random)"),
		out:       flag.String("out", "results", "directory for results.md, results.json and *.svg"),
		dataDir:   flag.String("data-dir", envOr("PEERS_DIR", filepath.Join(os.TempDir(), "paxlock-bench-peers")), "where the servers keep data (only to describe its disk)"),
		cpuFlag:   flag.Bool("cpu", true, "read the CPU time of every system's server processes (from the start scripts' pid files) and of lockbench at the edges of each measured window"),
		paxRunDir: flag.String("paxlock-rundir", "", "paxlock cluster's RUNDIR with n1.pid…n3.pid (default: $PAXLOCK_RUNDIR, else <data-dir>/paxlock as bench/scripts/paxlock.sh uses)"),
		idle:      flag.Duration("idle", 3*time.Second, "measure every system's idle CPU for this long before the runs (0: skip; needs -cpu)"),
		skipDown:  flag.Bool("skip-unavailable", false, "leave out a system that does not answer instead of failing"),
		verbose:   flag.Bool("v", false, "debug logging"),
		rerender:  flag.String("rerender", "", "only redraw results.md and the plots from this results.json into -out"),
		cpuProf:   flag.String("cpuprofile", "", "write the load generator's CPU profile (clients included) to this file"),
		pprofAddr: flag.String("pprof", "", "serve the load generator's /debug/pprof on this address (e.g. 127.0.0.1:6060)"),

		redisAddr:   flag.String("redis", def.RedisAddr, "Redis host:port"),
		redisAOF:    flag.String("redis-aof", def.RedisAOFAddr, "host:port of the Redis with appendfsync always"),
		redisPoll:   flag.Duration("redis-poll", def.RedisPoll, "Redis: sleep between SET NX attempts while a key is taken"),
		etcdEPs:     flag.String("etcd", strings.Join(def.EtcdEndpoints, ","), "etcd client URLs"),
		zkServers:   flag.String("zk", strings.Join(def.ZKServers, ","), "ZooKeeper host:port list"),
		paxReg:      flag.String("paxlock-registry", strings.Join(def.PaxlockRegistry, ","), "paxlock registry addresses"),
		paxNS:       flag.String("paxlock-namespace", def.PaxlockNamespace, "paxlock namespace"),
		paxSecret:   flag.String("paxlock-secret", "", "paxlock namespace secret (default: PAXLOCK_SECRET, else scripts/cluster.sh's)"),
		paxTLSReg:   flag.String("paxlock-tls-registry", strings.Join(def.PaxlockTLSRegistry, ","), "paxlock TLS client listeners (paxlock-tls)"),
		cpuBudget:   flag.Float64("cpu-budget", 0, "equal machines: hold every server process (each node, each peer server) to this many cores with a cgroup CPU quota of its own, the load generator outside (0: no budget; needs writable cgroups)"),
		cpuPeriod:   flag.Duration("cpu-period", 20*time.Millisecond, "the CPU budget's enforcement period (cfs_period_us / cpu.max)"),
		cpuOptional: flag.Bool("cpu-budget-optional", false, "with -cpu-budget, skip the run (exit 0, saying why) where cgroups are not writable instead of failing"),
		paxAPI:      flag.String("paxlock-api", strings.Join(def.PaxlockAPI, ","), "paxlock nodes' API listeners, api_addr (paxlock-api; TLS where -paxlock-ca exists, else h2c)"),
		paxAPIGRPC:  flag.Bool("paxlock-api-grpc", false, "paxlock-api speaks gRPC instead of the Connect protocol"),
		paxAPIRoute: flag.Bool("paxlock-api-route", true, "paxlock-api sends a key's calls to the node the answers' routing hints name as its master (false: worker i calls node i mod nodes)"),
		paxCA:       flag.String("paxlock-ca", "", "CA certificate of the paxlock cluster's TLS listeners (default: <paxlock-rundir>/certs/ca.crt)"),
	}
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: lockbench [flags]\n\nStart the servers first: bench/scripts/paxlock.sh start; bench/scripts/peers.sh start all\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	return f
}

// setLogging makes a text logger on standard error the default one, at
// debug level when verbose.
func setLogging(verbose bool) {
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
}

// startCPUProfile writes the process's CPU profile to path until stop is
// called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}

// servePprof serves /debug/pprof on addr in the background.
func servePprof(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("-pprof: %w", err)
	}
	slog.Info("pprof", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	go func() { _ = http.Serve(ln, nil) }() // net/http/pprof registers on the default mux
	return nil
}

// scenarios are the runs -scenarios selects, and the sweep's points,
// each checked; a -seed of 0 is replaced by a random one.
func scenarios(f *flags) (scs, sweep []load.Scenario, err error) {
	if *f.seed == 0 {
		*f.seed = load.RandomSeed()
	}
	base := load.Scenario{
		Workers: *f.workers, Duration: *f.duration, Warmup: *f.warmup, TTL: *f.ttl,
		AcquireTimeout: *f.acqTO, Seed: *f.seed,
	}
	for _, name := range splitList(*f.scenarios) {
		if name == "all" {
			name = "uncontended,contended,renew,rw,sweep"
		}
		for _, n := range strings.Split(name, ",") {
			sc := base
			sc.Name = n
			switch load.Kind(n) {
			case load.Uncontended:
				sc.Kind = load.Uncontended
			case load.Contended:
				sc.Kind, sc.Keys, sc.Hold = load.Contended, *f.keys, *f.hold
			case load.RenewHeavy:
				sc.Kind, sc.Renews = load.RenewHeavy, *f.renews
			case load.ReadWrite:
				sc.Kind, sc.Keys, sc.Hold, sc.ReadFraction = load.ReadWrite, *f.keys, *f.hold, *f.readFrac
			default:
				if n != "sweep" {
					return nil, nil, fmt.Errorf("unknown scenario %q", n)
				}
				ws, err := parseInts(*f.sweepW)
				if err != nil {
					return nil, nil, fmt.Errorf("-sweep: %w", err)
				}
				for _, w := range ws {
					s := base
					s.Name, s.Kind, s.Workers, s.Duration, s.Warmup = "sweep", load.Uncontended, w, *f.sweepDur, *f.sweepWarm
					sweep = append(sweep, s)
				}
				continue
			}
			scs = append(scs, sc)
		}
	}
	for _, sc := range append(slices.Clone(scs), sweep...) {
		if err := sc.Validate(); err != nil {
			return nil, nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
		}
	}
	if len(scs)+len(sweep) == 0 {
		return nil, nil, errors.New("no scenario selected")
	}
	return scs, sweep, nil
}

// systemsConfig is def with the flags' addresses, TTL and secret, sized
// for the most workers of a run or a sweep point.
func systemsConfig(def peers.Config, f *flags, sweep []load.Scenario) peers.Config {
	maxWorkers := *f.workers
	for _, s := range sweep {
		maxWorkers = max(maxWorkers, s.Workers)
	}
	cfg := def
	cfg.TTL, cfg.MaxWorkers = *f.ttl, maxWorkers
	cfg.RedisAddr, cfg.RedisPoll, cfg.RedisAOFAddr = *f.redisAddr, *f.redisPoll, *f.redisAOF
	cfg.EtcdEndpoints, cfg.ZKServers = splitList(*f.etcdEPs), splitList(*f.zkServers)
	cfg.PaxlockRegistry, cfg.PaxlockNamespace = splitList(*f.paxReg), *f.paxNS
	cfg.PaxlockTLSRegistry, cfg.PaxlockCA = splitList(*f.paxTLSReg), *f.paxCA
	cfg.PaxlockAPI, cfg.PaxlockAPIGRPC = splitList(*f.paxAPI), *f.paxAPIGRPC
	cfg.PaxlockAPINoRoute = !*f.paxAPIRoute
	if cfg.PaxlockCA == "" {
		rd := *f.paxRunDir
		if rd == "" {
			rd = envOr("PAXLOCK_RUNDIR", filepath.Join(*f.dataDir, "paxlock"))
		}
		cfg.PaxlockCA = filepath.Join(rd, "certs", "ca.crt")
	}
	if *f.paxSecret != "" {
		cfg.PaxlockSecret = *f.paxSecret
	} else if s := os.Getenv("PAXLOCK_SECRET"); s != "" {
		cfg.PaxlockSecret = s
	}
	return cfg
}

// openSystems opens the -systems, recording each in rep, the ones left
// out with why. It returns the lockers it opened even with an error, for
// the caller to close.
func openSystems(ctx context.Context, f *flags, cfg peers.Config, rep *report.Report) ([]load.Locker, error) {
	var lockers []load.Locker
	for _, name := range splitList(*f.systems) {
		lk, err := peers.Open(ctx, name, cfg)
		switch {
		case errors.Is(err, load.ErrNotBuilt):
			slog.Warn("skipping system", "system", name, "reason", err)
			rep.Systems = append(rep.Systems, report.System{Name: name, Display: report.DisplayName(name), Status: err.Error()})
			continue
		case err != nil && *f.skipDown:
			slog.Warn("skipping unavailable system", "system", name, "err", err)
			rep.Systems = append(rep.Systems, report.System{Name: name, Display: report.DisplayName(name), Status: "unavailable: " + err.Error()})
			continue
		case err != nil:
			return lockers, err
		}
		vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := lk.Version(vctx)
		cancel()
		if err != nil {
			slog.Warn("could not read server version", "system", name, "err", err)
			v = "unknown"
		}
		slog.Info("system ready", "system", name, "version", v)
		lockers = append(lockers, lk)
		rep.Systems = append(rep.Systems, report.SystemFrom(lk, v))
	}
	if len(lockers) == 0 {
		return lockers, load.ErrNoSystems
	}
	return lockers, nil
}

// cpuMeters, with -cpu, makes a CPU meter for each system whose server
// processes it finds, and measures their idle CPU into rep for -idle;
// without -cpu it returns nil.
func cpuMeters(ctx context.Context, f *flags, lockers []load.Locker, rep *report.Report) (map[string]load.CPUMeter, error) {
	if !*f.cpuFlag {
		return nil, nil
	}
	dirs := proccpu.Dirs{Peers: *f.dataDir, Paxlock: *f.paxRunDir}
	if dirs.Paxlock == "" {
		dirs.Paxlock = envOr("PAXLOCK_RUNDIR", filepath.Join(*f.dataDir, "paxlock"))
	}
	meters := map[string]load.CPUMeter{}
	var names []string
	for _, lk := range lockers {
		m, ok := proccpu.ForSystem(lk.Name(), dirs)
		if !ok {
			slog.Warn("no CPU meter for system", "system", lk.Name())
			continue
		}
		meters[lk.Name()] = m
		names = append(names, lk.Name())
		if s := m.ReadCPU(); s.ServerErr != "" {
			slog.Warn("servers' CPU cannot be read; their CPU figures will be n/a", "system", lk.Name(), "why", s.ServerErr)
		} else {
			slog.Info("CPU meter", "system", lk.Name(), "server_pids", fmt.Sprint(s.Procs))
		}
	}
	if *f.idle > 0 {
		slog.Info("measuring idle CPU", "for", *f.idle)
		idleCPU, err := load.MeasureIdle(ctx, names, meters, *f.idle)
		if err != nil {
			return nil, err
		}
		rep.IdleCPU = idleCPU
		for _, id := range rep.IdleCPU {
			slog.Info("idle CPU", "system", id.System, "server_cores", fmt.Sprintf("%.3f", id.ServerCores),
				"client_cores", fmt.Sprintf("%.3f", id.ClientCores), "note", id.ServerNote)
		}
	}
	return meters, nil
}

// runSuite runs the scenarios and the sweep on every locker, showing
// progress on standard error.
func runSuite(ctx context.Context, f *flags, lockers []load.Locker, scs, sweep []load.Scenario, meters map[string]load.CPUMeter) ([]load.Result, error) {
	stat, _ := os.Stderr.Stat()
	suite := &load.Suite{
		Lockers:      lockers,
		Scenarios:    scs,
		Repeats:      *f.repeats,
		Sweep:        sweep,
		SweepRepeats: *f.sweepRep,
		Meters:       meters,
		Pause:        *f.pauseFlag,
		Progress:     &load.Progress{W: os.Stderr, TTY: stat != nil && stat.Mode()&os.ModeCharDevice != 0, Every: 5 * time.Second},
	}
	return suite.Run(ctx)
}

// writeReport completes rep with results and writes its files into out.
func writeReport(rep *report.Report, results []load.Result, out string) error {
	rep.Results = results
	rep.Finished = time.Now()
	rep.LoadAvgEnd = report.LoadAvg()
	files, err := rep.WriteAll(out)
	if err != nil {
		return err
	}
	slog.Info("results written", "files", strings.Join(files, " "), "took", rep.Finished.Sub(rep.Started).Round(time.Second))
	return nil
}

// rerenderReport rewrites the report files from a results.json.
func rerenderReport(jsonPath, out string) error {
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		return err
	}
	var rep report.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s: %w", jsonPath, err)
	}
	files, err := rep.WriteAll(out)
	if err != nil {
		return err
	}
	slog.Info("results rewritten", "files", strings.Join(files, " "))
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad worker count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
