package gossip

import (
	"context"
	"net"
	"time"
)

// rejoin joins every configured seed that is not a live member, at once
// and then every RejoinInterval, until Leave or Stop.
func (m *Membership) rejoin() {
	defer m.wg.Done()
	if len(m.cfg.Seeds) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-m.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		if m.phase.Load() != phaseRunning {
			return
		}
		if missing := m.missingSeeds(ctx); len(missing) > 0 {
			if ml := m.ml.Load(); ml != nil {
				n, err := ml.Join(missing)
				if n > 0 {
					m.log.Debug("membership: joined seeds", "seeds", missing, "answered", n)
				} else {
					m.log.Debug("membership: seeds not reachable", "seeds", missing, "err", err)
				}
			}
		}
		t.Reset(m.timing.RejoinInterval)
	}
}

// missingSeeds returns the configured seeds that are neither this node nor
// a live member. Host names are resolved; one that does not resolve counts
// as missing.
func (m *Membership) missingSeeds(ctx context.Context) []string {
	live := map[string]bool{m.GossipAddr(): true}
	m.mu.Lock()
	for _, r := range m.members {
		if r.state.Live() {
			live[r.addr] = true
		}
	}
	m.mu.Unlock()
	var out []string
	for _, s := range m.cfg.Seeds {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			out = append(out, s)
			continue
		}
		var ips []string
		if ip := net.ParseIP(host); ip != nil {
			ips = []string{ip.String()}
		} else {
			rctx, cancel := context.WithTimeout(ctx, m.timing.TCPTimeout)
			addrs, err := net.DefaultResolver.LookupHost(rctx, host)
			cancel()
			if err == nil {
				ips = addrs
			}
		}
		found := false
		for _, ip := range ips {
			if live[net.JoinHostPort(ip, port)] {
				found = true
				break
			}
		}
		if !found {
			out = append(out, s)
		}
	}
	return out
}
