// Command movepause measures what a client sees while its namespace moves
// between clusters: it fills the namespace with held locks, runs probe
// workers that take and release locks of their own without pause, moves
// the namespace through the meta cluster's admin API, and reports how
// long the move took from its record to done and the longest time a
// probe's acquire waited (the pause). Against make run CLUSTERS=2:
//
//	go run ./cmd/movepause -n 100000
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client"
)

type flags struct {
	n, workers, probes       int
	registry, ns, secret, to string
	metaAdmin, metaCA        string
	metaTokenFile            string
	ttl                      time.Duration
}

func main() {
	f := flags{}
	flag.IntVar(&f.n, "n", 10000, "locks to hold in the namespace before the move")
	flag.IntVar(&f.workers, "workers", 256, "concurrent acquirers while filling")
	flag.IntVar(&f.probes, "probes", 8, "probe workers taking and releasing their own locks throughout")
	flag.StringVar(&f.registry, "registry", "127.0.0.1:7501,127.0.0.1:7502", "registry addresses")
	flag.StringVar(&f.ns, "namespace", "app", "namespace")
	flag.StringVar(&f.secret, "secret", "app-secret", "namespace secret")
	flag.StringVar(&f.to, "to", "", "cluster to move to (default: the other of east and west)")
	flag.StringVar(&f.metaAdmin, "meta-admin", "127.0.0.1:7301", "a meta node's admin address")
	flag.StringVar(&f.metaCA, "meta-ca", "../.run/multi/certs/meta/ca.crt", "the meta cluster's CA (\"\": plain HTTP)")
	flag.StringVar(&f.metaTokenFile, "meta-token-file", "../.run/multi/certs/meta/admin.token", "the meta cluster's admin token")
	flag.DurationVar(&f.ttl, "ttl", time.Hour, "TTL of the filled locks (not renewed)")
	flag.Parse()
	if err := run(f); err != nil {
		fmt.Fprintln(os.Stderr, "movepause:", err)
		os.Exit(1)
	}
}

func run(f flags) error {
	ctx := context.Background()
	meta, err := newMeta(f)
	if err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	c, err := client.New(ctx, client.Config{Registry: strings.Split(f.registry, ","), Namespace: f.ns, Secret: f.secret, Logger: quiet})
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	start := time.Now()
	if err := fill(ctx, c, f); err != nil {
		return err
	}
	fmt.Printf("held %d locks in %v\n", f.n, time.Since(start).Round(time.Millisecond))

	reg, err := meta.registry()
	if err != nil {
		return err
	}
	from, cur := "", adminapi.RegistryMove{}
	for _, n := range reg.Namespaces {
		if n.Name == f.ns {
			from = n.Cluster
		}
	}
	for _, m := range reg.Moves {
		if m.Namespace == f.ns {
			cur = m
		}
	}
	to := f.to
	if to == "" {
		to = map[string]string{"east": "west", "west": "east"}[from]
	}
	pr := startProbes(ctx, c, f.probes)
	time.Sleep(2 * time.Second)
	before := pr.snapshot()
	mv := adminapi.RegistryMove{Namespace: f.ns, ID: cur.ID + 1, From: from, To: to, State: adminapi.MovePrepare, Token: cur.Token}
	moved := time.Now()
	if err := meta.put(mv); err != nil {
		return err
	}
	if err := meta.waitDone(f.ns, mv.ID); err != nil {
		return err
	}
	took := time.Since(moved)
	time.Sleep(2 * time.Second)
	pr.stop()
	during := pr.snapshot()
	fmt.Printf("moved %s from %s to %s holding %d locks: %v from the record to done\n", f.ns, from, to, f.n, took.Round(time.Millisecond))
	fmt.Printf("probes: longest acquire %v (before the move: %v), %d ops, %d errors\n",
		during.max.Round(time.Millisecond), before.max.Round(time.Millisecond), during.ops, during.errs)
	return nil
}

// fill takes n locks with fresh keys (try-locks, no renewal).
func fill(ctx context.Context, c *client.Client, f flags) error {
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range f.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(f.n) {
					return
				}
				m := c.Mutex(fmt.Sprintf("held-%d", i), client.TTL(f.ttl))
				if err := m.TryLock(ctx); err != nil {
					if failed.Add(1) == 1 {
						fmt.Printf("first failed acquire: %v\n", err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		fmt.Printf("%d of %d acquires failed (overloaded or timed out under the fill's load): the move carries the others\n", n, f.n)
	}
	return nil
}

// probes take and release locks of their own and keep the longest wait.
type probes struct {
	quit chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	max  time.Duration
	ops  int64
	errs int64
}

type probeStats struct {
	max       time.Duration
	ops, errs int64
}

func startProbes(ctx context.Context, c *client.Client, n int) *probes {
	p := &probes{quit: make(chan struct{})}
	for w := range n {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-p.quit:
					return
				default:
				}
				m := c.Mutex(fmt.Sprintf("probe-%d-%d", w, i%64))
				actx, cancel := context.WithTimeout(ctx, time.Minute)
				t := time.Now()
				err := m.Lock(actx)
				d := time.Since(t)
				cancel()
				if err == nil {
					err = m.Unlock(ctx)
				}
				p.mu.Lock()
				p.max = max(p.max, d)
				p.ops++
				if err != nil {
					p.errs++
				}
				p.mu.Unlock()
			}
		}()
	}
	return p
}

func (p *probes) stop() { close(p.quit); p.wg.Wait() }

// snapshot returns the figures so far and starts counting afresh.
func (p *probes) snapshot() probeStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := probeStats{max: p.max, ops: p.ops, errs: p.errs}
	p.max, p.ops, p.errs = 0, 0, 0
	return s
}

// meta reaches the meta cluster's admin API.
type meta struct {
	url, token string
	hc         *http.Client
}

func newMeta(f flags) (*meta, error) {
	m := &meta{url: "http://" + f.metaAdmin, hc: &http.Client{Timeout: 30 * time.Second}}
	if f.metaCA != "" {
		pem, err := os.ReadFile(f.metaCA)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("-meta-ca holds no certificate")
		}
		m.url = "https://" + f.metaAdmin
		m.hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	if f.metaTokenFile != "" {
		b, err := os.ReadFile(f.metaTokenFile)
		if err != nil {
			return nil, err
		}
		m.token = strings.TrimSpace(string(b))
	}
	return m, nil
}

func (m *meta) do(method, path string, body []byte, want ...int) ([]byte, error) {
	req, err := http.NewRequest(method, m.url+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if m.token != "" {
		req.Header.Set("Authorization", "Bearer "+m.token)
	}
	resp, err := m.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(want, resp.StatusCode) {
		return nil, fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, b)
	}
	return b, nil
}

func (m *meta) registry() (adminapi.Registry, error) {
	var reg adminapi.Registry
	b, err := m.do(http.MethodGet, "/registry", nil, http.StatusOK)
	if err != nil {
		return reg, err
	}
	return reg, json.Unmarshal(b, &reg)
}

func (m *meta) put(mv adminapi.RegistryMove) error {
	b, err := json.Marshal(mv)
	if err != nil {
		return err
	}
	_, err = m.do(http.MethodPut, "/registry/moves/"+mv.Namespace, b, http.StatusNoContent)
	return err
}

func (m *meta) waitDone(ns string, id uint64) error {
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		reg, err := m.registry()
		if err == nil {
			for _, mv := range reg.Moves {
				if mv.Namespace == ns && mv.ID == id && mv.State.Finished() {
					if mv.State != adminapi.MoveDone {
						return fmt.Errorf("the move ended %s", mv.State)
					}
					return nil
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("the move did not end within 10 minutes")
}
