// Command paxlockd runs one paxlock node.
//
//	paxlockd -config node1.json [-id N] [-data DIR] [-admin ADDR]
//
// It reads the JSON configuration (see server.Config), lets flags override
// it, starts the Paxos groups before it accepts clients, and on SIGTERM or
// SIGINT stops accepting, fails what is in flight and closes its store.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/paxlock/paxlock/server"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "paxlockd:", err)
		os.Exit(1)
	}
}

func run() error {
	path := flag.String("config", "", "JSON configuration file (required)")
	id := flag.Uint("id", 0, "node id (overrides the file)")
	data := flag.String("data", "", "data directory (overrides the file)")
	admin := flag.String("admin", "", "admin HTTP address (overrides the file)")
	level := flag.String("log-level", "info", "debug, info, warn or error")
	flag.Parse()
	if *path == "" {
		flag.Usage()
		return fmt.Errorf("-config is required")
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
	slog.SetDefault(log)

	cfg, err := server.Load(*path)
	if err != nil {
		return err
	}
	if *id != 0 {
		cfg.NodeID = uint32(*id)
	}
	if *data != "" {
		cfg.DataDir = *data
	}
	if *admin != "" {
		cfg.AdminAddr = *admin
	}
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
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	s := <-sig
	log.Info("shutting down", "signal", s.String())
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(ctx)
}
