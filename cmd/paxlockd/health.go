package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/paxlock/paxlock/server"
)

// healthTimeout bounds one -health probe.
const healthTimeout = 3 * time.Second

// probeHealth asks the node of the configuration at path for endpoint
// on its own admin address (loopback where admin_addr binds every
// interface), as a container's health check does from inside the
// container (an image FROM scratch has no curl): nil if it answers 200.
// The admin endpoint's certificate is not verified: the probe dials an
// address of its own machine, where there is no one to authenticate, and
// the node's certificate need not name that address.
func probeHealth(ctx context.Context, path, endpoint string, override func(*server.Config)) error {
	cfg, err := server.Load(path)
	if err != nil {
		return err
	}
	override(&cfg)
	if cfg.AdminAddr == "" {
		return fmt.Errorf("%s: no admin_addr to probe", path)
	}
	host, port, err := net.SplitHostPort(cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("%s: admin_addr: %w", path, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	scheme := "http"
	tr := &http.Transport{DisableKeepAlives: true}
	if cfg.AdminTLS != nil {
		scheme = "https"
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // this machine's own address: see probeHealth
	}
	url := scheme + "://" + net.JoinHostPort(host, port) + endpoint
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s answered %s", url, resp.Status)
	}
	return nil
}

// errHealthEndpoint is -health's error for an endpoint it does not probe.
var errHealthEndpoint = errors.New("-health: want healthz or readyz")
