// Command manylocks fills a running paxlock cluster with held locks and
// reports the acquire rate and the nodes' resident memory, for the "1M held
// locks" target: run `make run`, then
//
//	go run ./cmd/manylocks -n 1000000
//
// then `make stop && make run` to time a restart with that many locks. By
// default the client gives its locks back as it exits (Close), so the
// cluster holds them only while manylocks runs; -keep exits without
// giving them back, and they stay held until their TTL (-ttl) runs out.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/client"
)

func main() {
	n := flag.Int("n", 1000000, "locks to take")
	workers := flag.Int("workers", 1024, "concurrent acquirers")
	ttl := flag.Duration("ttl", time.Hour, "lock TTL (no renewal)")
	registry := flag.String("registry", "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103", "node addresses")
	keep := flag.Bool("keep", false, "exit without giving the locks back: they stay held until their TTL")
	flag.Parse()
	ctx := context.Background()
	c, err := client.New(ctx, client.Config{Registry: strings.Split(*registry, ","), Namespace: "default", Secret: "paxlock",
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer func() {
		if !*keep {
			_ = c.Close() // the run's figures are already printed
		}
	}()
	var next, done, errs atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(*n) {
					return
				}
				m := c.Mutex(fmt.Sprintf("many-%d", i), client.TTL(*ttl))
				if err := m.TryLock(ctx); err != nil {
					errs.Add(1)
					continue
				}
				if d := done.Add(1); d%100000 == 0 {
					fmt.Printf("%d locks held, %.0f/s\n", d, float64(d)/time.Since(start).Seconds())
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	fmt.Printf("%d locks taken in %s (%.0f/s), %d errors\n", done.Load(), el.Round(time.Second), float64(done.Load())/el.Seconds(), errs.Load())
	// The brackets keep pgrep from matching this shell's own command line
	// (it printed a stray ~1.6 MB line). Every paxlockd on the machine is
	// listed, with its command line, so that nodes of other clusters can
	// be told apart.
	out, _ := exec.Command("sh", "-c", `for p in $(pgrep -f '[p]axlockd -config'); do echo "$(grep VmRSS /proc/$p/status)	$(tr '\0' ' ' < /proc/$p/cmdline)"; done`).CombinedOutput()
	fmt.Printf("paxlockd resident memory:\n%s", out)
}
