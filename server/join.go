package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/internal/pki"
)

// Joining a running cluster (paxlockd -join ADDR): PrepareJoin reads the
// member list from a member's admin endpoint and makes the configuration
// that of a node being added (its Nodes the live members and itself, Join
// set); New and Start then run the node, whose groups wait for a snapshot;
// JoinCluster asks the cluster to add the node, which the master of group
// 0 does group by group (AddMember). A node whose data directory was
// stamped already (a restart) skips all of it.

// ErrJoinRefused means the cluster refused to add this node: its id was
// removed, or is known with another data directory.
var ErrJoinRefused = errors.New("the cluster refused this node")

// Joined reports whether cfg's data directory was stamped already: the
// node has state, and -join has nothing to do.
func Joined(cfg Config) bool {
	_, err := os.Stat(filepath.Join(cfg.DataDir, identityFile))
	return err == nil
}

// adminHTTP returns a client for the cluster's admin endpoints, trusting
// the cluster CA when cfg has one; redirects are not followed by the
// client but by adminCallVia, which decides where the token may go.
func adminHTTP(cfg Config) (*http.Client, error) {
	tr := &http.Transport{DisableKeepAlives: true}
	if cfg.TLS != nil && cfg.TLS.CA != "" {
		pool, err := pki.LoadCAPool(cfg.TLS.CA)
		if err != nil {
			return nil, fmt.Errorf("server: admin call: %w", err)
		}
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	}
	return &http.Client{Transport: tr, Timeout: 5 * time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, nil
}

// adminURL makes addr (host:port or a URL) a base URL.
func adminURL(addr string, https bool) string {
	if strings.Contains(addr, "://") {
		return strings.TrimSuffix(addr, "/")
	}
	if https {
		return "https://" + addr
	}
	return "http://" + addr
}

// adminCall sends a request to the admin endpoint at url and returns the
// final answer's status and body; see adminCallVia.
func adminCall(ctx context.Context, hc *http.Client, method, url, token string, body []byte) (int, []byte, error) {
	return adminCallVia(ctx, hc, method, url, token, body, nil)
}

// adminCallVia sends a request to the admin endpoint at url, following up
// to five redirects, and returns the final answer's status and body. The
// token goes only where adminRedirectTrusted allows: a redirect elsewhere
// is refused with an error, so that a node (or whoever answers in its
// place) cannot collect the token by naming another host.
func adminCallVia(ctx context.Context, hc *http.Client, method, url, token string, body []byte, trusted []string) (int, []byte, error) {
	first := url
	for range 6 {
		req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
		if err != nil {
			return 0, nil, fmt.Errorf("server: admin call: %w", err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if body != nil || method != http.MethodGet {
			// The admin API takes changes only as JSON, body-less ones too.
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, nil, fmt.Errorf("server: admin call: %s %s: %w", method, url, err)
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		_ = resp.Body.Close() // read to the end: nothing to report
		if err != nil {
			return 0, nil, fmt.Errorf("server: admin call: %s %s: %w", method, url, err)
		}
		if resp.StatusCode == http.StatusTemporaryRedirect || resp.StatusCode == http.StatusPermanentRedirect {
			loc, err := req.URL.Parse(resp.Header.Get("Location"))
			if err != nil {
				return 0, nil, fmt.Errorf("server: admin call: %s %s: redirect: %w", method, url, err)
			}
			if token != "" && !adminRedirectTrusted(hc, first, loc, trusted) {
				return 0, nil, fmt.Errorf("server: admin call: %s %s: %w to %s: the admin token is not sent to another host over plain HTTP; call that node directly", method, url, errUntrustedRedirect, loc.Redacted())
			}
			url = loc.String()
			continue
		}
		return resp.StatusCode, b, nil
	}
	return 0, nil, fmt.Errorf("server: admin call: %s %s: too many redirects", method, url)
}

// errUntrustedRedirect is adminCallVia's refusal of a redirect the token
// may not follow.
var errUntrustedRedirect = errors.New("redirected")

// adminRedirectTrusted reports whether the admin token may follow a
// redirect from a call first made to first, to loc: loc is HTTPS and hc
// verifies servers against the cluster CA (only a node holds such a
// certificate), or loc is not a downgrade to plain HTTP and names
// first's host or one of trusted (host:port: the cluster's admin
// addresses as this node's configuration lists them).
func adminRedirectTrusted(hc *http.Client, first string, loc *neturl.URL, trusted []string) bool {
	if loc.Scheme == "https" {
		if tr, ok := hc.Transport.(*http.Transport); ok && tr.TLSClientConfig != nil && tr.TLSClientConfig.RootCAs != nil {
			return true
		}
	}
	f, err := neturl.Parse(first)
	if err != nil || f.Scheme == "https" && loc.Scheme != "https" {
		return false
	}
	return strings.EqualFold(loc.Hostname(), f.Hostname()) || slices.Contains(trusted, loc.Host)
}

// PrepareJoin reads the cluster's member list from the admin endpoint at
// addr and makes cfg the configuration of a node being added: Nodes the
// live members plus this node (cfg's own entry), Join set. It fails when
// the list has this node's id already (removed, or known with another
// data directory: a node with an empty data directory must take a new
// id).
func PrepareJoin(ctx context.Context, cfg *Config, addr string) error {
	return prepareJoin(ctx, cfg, addr, false)
}

// RefreshNodes reads the member list like PrepareJoin, for a node that
// joined before and restarts (its id is in the list): cfg's Nodes become
// the live members and itself, so that it reaches its peers even when its
// own copy of the list (group 0) had not arrived before it stopped.
func RefreshNodes(ctx context.Context, cfg *Config, addr string) error {
	return prepareJoin(ctx, cfg, addr, true)
}

func prepareJoin(ctx context.Context, cfg *Config, addr string, rejoin bool) error {
	cfg.EnsureDefaults()
	self := cfg.self()
	if self.ID == 0 {
		return fmt.Errorf("server: join: node %d is not in the configuration's nodes (give its own addresses there)", cfg.NodeID)
	}
	token, err := cfg.adminToken()
	if err != nil {
		return err
	}
	hc, err := adminHTTP(*cfg)
	if err != nil {
		return err
	}
	https := cfg.AdminTLS != nil || cfg.TLS != nil
	code, body, err := adminCall(ctx, hc, http.MethodGet, adminURL(addr, https)+"/members", token, nil)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("server: join: GET /members at %s: %d %s", addr, code, bytes.TrimSpace(body))
	}
	var rep adminapi.MembersReport
	if err := json.Unmarshal(body, &rep); err != nil {
		return fmt.Errorf("server: join: member list: %w", err)
	}
	if rep.Cluster != cfg.ClusterName {
		return fmt.Errorf("server: join: %w: the node at %s belongs to cluster %q, this node's configuration names %q", ErrJoinRefused, addr, rep.Cluster, cfg.ClusterName)
	}
	var nodes []NodeAddr
	for _, m := range rep.Members {
		if m.ID == cfg.NodeID && rejoin {
			if !m.Live() {
				return fmt.Errorf("server: node %d: %w: %w", m.ID, ErrJoinRefused, group.ErrMemberRemoved)
			}
			continue
		}
		if m.ID == cfg.NodeID {
			if !m.Live() {
				return fmt.Errorf("server: join: node %d: %w: %w", m.ID, ErrJoinRefused, group.ErrMemberRemoved)
			}
			return fmt.Errorf("server: join: node %d: %w: the cluster knows this id and this data directory is new; a node that lost its data must join under a new id (remove the old one with paxlockctl member remove): %w", m.ID, ErrJoinRefused, group.ErrIncarnation)
		}
		if m.Live() {
			nodes = append(nodes, nodeAddrOf(m))
		}
	}
	if len(nodes) == 0 {
		return fmt.Errorf("server: join: the member list at %s is empty", addr)
	}
	cfg.Nodes = append(nodes, self)
	cfg.Join = !rejoin
	return nil
}

// JoinCluster asks the cluster, through the admin endpoint at addr, to
// add this node (POST /members), and returns once every group has it as
// an acceptor. A change the cluster could not complete is retried until
// ctx ends; a refusal (removed id, other data directory) is returned at
// once.
func (s *Server) JoinCluster(ctx context.Context, addr string) error {
	token, err := s.cfg.adminToken()
	if err != nil {
		return err
	}
	hc, err := adminHTTP(s.cfg)
	if err != nil {
		return err
	}
	m := s.selfMember(group.MemberJoining)
	body, _ := json.Marshal(m)
	url := adminURL(addr, s.sec.adminTLS != nil) + "/members"
	var trusted []string // the token may follow a redirect to these
	for _, n := range s.cfg.Nodes {
		if n.Admin != "" {
			trusted = append(trusted, n.Admin)
		}
	}
	var refused error // an answer that retrying cannot change
	err = retry(ctx, 200*time.Millisecond, 5*time.Second, func() error {
		code, resp, err := adminCallVia(ctx, hc, http.MethodPost, url, token, body, trusted)
		switch {
		case err == nil && code == http.StatusOK:
			return nil
		case errors.Is(err, errUntrustedRedirect):
			refused = err
			return refused
		case err == nil && code == http.StatusConflict:
			refused = fmt.Errorf("server: join: %w: %s", ErrJoinRefused, bytes.TrimSpace(resp))
			return refused
		case err == nil && code < 500:
			refused = fmt.Errorf("server: join: POST /members: %d %s", code, bytes.TrimSpace(resp))
			return refused
		case err == nil:
			err = fmt.Errorf("%d %s", code, bytes.TrimSpace(resp))
		}
		s.log.Warn("joining the cluster: not done yet; retrying", "err", err)
		return err
	}, func(error) bool { return refused != nil })
	switch {
	case err == nil:
		s.log.Info("joined the cluster", "node", s.cfg.NodeID)
		return nil
	case refused != nil:
		return refused
	}
	return fmt.Errorf("server: join: %w", err)
}
