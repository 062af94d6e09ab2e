// Command paxlockd runs one paxlock node, or a standalone registry.
//
//	paxlockd -config node1.json [-id N | -id-from-hostname] [-data DIR] [-admin ADDR] [-log-format text|json]
//	paxlockd -role registry -config registry.json [-meta ADDRS]
//	paxlockd -check-config node1.json [-role registry] [-id N] [-data DIR] [-admin ADDR]
//	paxlockd -version
//	paxlockd -config node1.json -health healthz|readyz
//	paxlockd -config node1.json -restore FILE [flags]
//
// A standalone registry serves the cluster views of several clusters and
// maps each namespace to its cluster; its configuration is
//
//	{"listen": "0.0.0.0:7100",
//	 "clusters": {"a": ["10.0.0.1:7101", "10.0.0.2:7101"]},
//	 "namespaces": {"orders": "a"}}
//
// or, for a registry whose tables are replicated in a meta cluster (see
// docs/operations.md, "Running many clusters"),
//
//	{"listen": "0.0.0.0:7100", "admin_listen": "127.0.0.1:7300",
//	 "meta": {"addrs": ["10.0.9.1:7101"], "namespace": "registry",
//	          "secret_file": "/etc/paxlock/registry.secret"}}
//
// It reads the JSON configuration (see server.Config), lets flags override
// it, starts the Paxos groups before it accepts clients, and on SIGTERM or
// SIGINT stops accepting, fails what is in flight and closes its store.
// Unknown keys in either configuration are an error naming the key.
// -health healthz|readyz asks the node of -config for that endpoint on
// its own admin address (loopback for 0.0.0.0) and exits 0 on 200, 1
// otherwise: the
// container image's health check, which has no curl to call.
// -check-config validates a file as a start would (exit status 0, or 1
// and the error) without opening storage or listening; -version prints
// the module version, VCS revision and time, and Go version the binary
// was built from. -restore FILE seeds the node's empty data directory
// with a backup taken by paxlockctl backup (see server.Restore), then
// starts as usual: every node of the new cluster is started with the same
// file; the node refuses a data directory that holds anything, a file of
// another cluster or group count, and a corrupt file, writing nothing.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/paxlock/paxlock/apiserver"
	"github.com/paxlock/paxlock/internal/buildinfo"
	"github.com/paxlock/paxlock/registry"
	"github.com/paxlock/paxlock/server"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "paxlockd:", err)
		os.Exit(1)
	}
}

func run() error {
	f := parseFlags()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (flags only)", flag.Args())
	}
	if f.version {
		fmt.Println(buildinfo.Line("paxlockd"))
		return nil
	}
	if err := f.resolveID(); err != nil {
		return err
	}
	if f.role != "node" && f.role != "registry" {
		return fmt.Errorf("-role %q: want node or registry", f.role)
	}
	if f.health != "" {
		if f.health != "healthz" && f.health != "readyz" {
			return errHealthEndpoint
		}
		return probeHealth(context.Background(), f.path, "/"+f.health, f.override)
	}
	if f.check != "" {
		if err := checkConfig(f.check, f.role, f.meta, f.override); err != nil {
			return err
		}
		fmt.Printf("%s: ok\n", f.check)
		return nil
	}
	if f.path == "" {
		flag.Usage()
		return fmt.Errorf("-config is required")
	}
	log, err := startLogging(f)
	if err != nil {
		return err
	}
	if f.role == "registry" {
		return runRegistry(f.path, f.meta, log)
	}
	cfg, joining, err := nodeConfig(f, log)
	if err != nil {
		return err
	}
	return serveNode(cfg, log, joining, f.join)
}

// options are paxlockd's command-line flags.
type options struct {
	path, data, admin, level, format, role, join, restore, check, meta string
	health                                                             string
	id                                                                 uint
	version, idFromHost                                                bool
}

// parseFlags defines the flags and parses the command line.
func parseFlags() *options {
	f := &options{}
	flag.StringVar(&f.path, "config", "", "JSON configuration file (required)")
	flag.UintVar(&f.id, "id", 0, "node id (overrides the file)")
	flag.BoolVar(&f.idFromHost, "id-from-hostname", false, "node id from the host name's ordinal suffix plus one ($HOSTNAME, else the system's host name): paxlock-0 is node 1, as a Kubernetes StatefulSet names its pods")
	flag.StringVar(&f.data, "data", "", "data directory (overrides the file)")
	flag.StringVar(&f.admin, "admin", "", "admin HTTP address (overrides the file)")
	flag.StringVar(&f.level, "log-level", "info", "debug, info, warn or error")
	flag.StringVar(&f.format, "log-format", "text", "text (logfmt) or json (one object per line)")
	flag.StringVar(&f.role, "role", "node", "node or registry")
	flag.StringVar(&f.meta, "meta", "", "registry: comma-separated client addresses of the meta cluster's nodes, whose tables the registry serves (overrides the file's meta.addrs)")
	flag.BoolVar(&f.version, "version", false, "print the version and build information, then exit")
	flag.StringVar(&f.join, "join", "", "add this node to the running cluster whose member's admin endpoint is at this address (host:port or URL): with an empty data directory, the node reads the member list there, starts, and asks to be added; with a data directory, it restarts as usual")
	flag.StringVar(&f.restore, "restore", "", "seed the empty data directory with this backup (paxlockctl backup), then start")
	flag.StringVar(&f.health, "health", "", "probe the node of -config on its own admin address (loopback where it binds 0.0.0.0) and exit 0 if it answers 200: healthz (the process serves) or readyz (quorum and client listener); a container's health check")
	flag.StringVar(&f.check, "check-config", "", "validate this configuration file (with -role and the override flags) and exit: 0 if it could start, 1 with the error if not")
	flag.Parse()
	return f
}

// override applies the flags that override the configuration file.
func (f *options) override(cfg *server.Config) {
	if f.id != 0 {
		cfg.NodeID = uint32(f.id)
	}
	if f.data != "" {
		cfg.DataDir = f.data
	}
	if f.admin != "" {
		cfg.AdminAddr = f.admin
	}
}

// startLogging makes the logger of -log-level and -log-format the
// default one, and logs the start.
func startLogging(f *options) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(f.level)); err != nil {
		return nil, fmt.Errorf("-log-level: %w", err)
	}
	log, err := newLogger(os.Stderr, f.format, lv)
	if err != nil {
		return nil, err
	}
	slog.SetDefault(log)
	log.Info("paxlockd starting", "version", buildinfo.Line("paxlockd"), "role", f.role, "config", f.path)
	return log, nil
}

// nodeConfig loads the node's configuration with the flags applied, reads
// the member list for -join and seeds the data directory for -restore.
// joining is set when the node is to ask to be added to the cluster.
func nodeConfig(f *options, log *slog.Logger) (cfg server.Config, joining bool, err error) {
	cfg, err = server.Load(f.path)
	if err != nil {
		return cfg, false, err
	}
	f.override(&cfg)
	if f.join != "" && f.restore != "" {
		return cfg, false, errors.New("-join and -restore exclude each other: -restore seeds a new cluster, -join adds a node to a running one")
	}
	joining = f.join != "" && !server.Joined(cfg)
	if f.join != "" && !joining {
		log.Info("-join: the data directory has state already; restarting as a member", "data", cfg.DataDir)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := server.RefreshNodes(ctx, &cfg, f.join); err != nil {
			log.Warn("-join: could not read the member list; starting with the one this node has", "err", err)
		}
		cancel()
	}
	if joining {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := server.PrepareJoin(ctx, &cfg, f.join)
		cancel()
		if err != nil {
			return cfg, false, err
		}
		log.Info("joining the cluster", "via", f.join, "members", len(cfg.Nodes)-1)
	}
	if f.restore != "" {
		if _, err := server.Restore(cfg, f.restore, log); err != nil {
			return cfg, false, err
		}
	}
	return cfg, joining, nil
}

// serveNode starts the node (and, when joining, asks join's node to add
// it), serves until SIGTERM or SIGINT or the node fails, and shuts it
// down.
func serveNode(cfg server.Config, log *slog.Logger, joining bool, join string) error {
	cfg.Memory.ApplyMemoryLimit(server.CgroupMemoryLimit(), log)
	srv, err := server.New(cfg, log)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err = srv.Start(ctx)
	cancel()
	if err != nil {
		_ = srv.Shutdown(context.Background())
		return err
	}
	api, err := startAPI(srv, log)
	if err != nil {
		_ = srv.Shutdown(context.Background())
		return err
	}
	shutdown := func(ctx context.Context) error {
		var apiErr error
		if api != nil {
			apiErr = api.Shutdown(ctx)
		}
		return errors.Join(apiErr, srv.Shutdown(ctx))
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	joinErr := make(chan error, 1)
	if joining {
		jctx, jcancel := context.WithCancel(context.Background())
		defer jcancel()
		go func() { joinErr <- srv.JoinCluster(jctx, join) }()
	}
	var s os.Signal
	fail := func(err error) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return errors.Join(err, shutdown(ctx))
	}
	select {
	case s = <-sig:
	case err := <-srv.Failed():
		return fail(err)
	case err := <-joinErr:
		if err != nil {
			return fail(err)
		}
		select {
		case s = <-sig:
		case err := <-srv.Failed():
			return fail(err)
		}
	}
	log.Info("shutting down", "signal", s.String())
	// The hand-over of the node's groups (drain_timeout) comes first; 10 s
	// for the rest.
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second+max(0, time.Duration(srv.Config().DrainTimeout)))
	defer cancel()
	return shutdown(ctx)
}

// startAPI serves the node's API (package apiserver) at api_addr, if
// set; nil without it.
func startAPI(srv *server.Server, log *slog.Logger) (*apiserver.Listener, error) {
	cfg := srv.Config()
	if cfg.APIAddr == "" {
		return nil, nil
	}
	api, err := apiserver.Listen(srv, cfg.APIAddr, apiserver.Options{Log: log, MaxDrift: cfg.MaxDrift, MaxConns: cfg.MaxConns})
	if err != nil {
		return nil, err
	}
	log.Info("api listening", "addr", api.Addr(), "tls", srv.ClientTLSConfig() != nil)
	return api, nil
}

// checkConfig reads and validates the configuration file path of role
// ("node" or "registry") as starting would, without opening storage or
// listening: a node's after override applied the flags.
func checkConfig(path, role, meta string, override func(*server.Config)) error {
	if role == "registry" {
		sc, err := registryStandalone(path, meta, slog.New(slog.DiscardHandler))
		if err != nil {
			return err
		}
		if _, err = registry.NewStandalone(sc); err != nil {
			return fmt.Errorf("registry config %s: %w", path, err)
		}
		return nil
	}
	cfg, err := server.Load(path)
	if err != nil {
		return err
	}
	override(&cfg)
	if err := cfg.Check(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// newLogger returns a logger writing to w in format ("text" or "json") at
// level lv and above.
func newLogger(w io.Writer, format string, lv slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("-log-format %q: want text or json", format)
}
