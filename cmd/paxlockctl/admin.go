package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/internal/pki"
)

// devCertsDir is where make run keeps its development certificates.
const devCertsDir = ".run/certs"

// devPlainToken is where make run keeps the admin token of a plaintext
// cluster (CLUSTER_SECURE=0).
const devPlainToken = ".run/admin.token"

// adminClient talks to the nodes' admin endpoints.
type adminClient struct {
	addrs  []string
	scheme string // "http://" or "https://"
	token  string // "": none sent
	tr     *http.Transport
}

// newAdminClient sets up HTTPS with the CA in caFile (if any) and the
// bearer token from PAXLOCK_ADMIN_TOKEN or tokenFile. Unless explicit
// (either flag given), make run's development files are used if present:
// its CA and token, or, for a plaintext cluster, its token alone.
func newAdminClient(addrs []string, caFile, tokenFile string, explicit bool) (*adminClient, error) {
	if !explicit {
		ca, tok := filepath.Join(devCertsDir, pki.DevCACert), filepath.Join(devCertsDir, pki.DevAdminToken)
		switch {
		case exists(ca) && exists(tok):
			caFile, tokenFile = ca, tok
		case exists(devPlainToken):
			tokenFile = devPlainToken
		}
	}
	a := &adminClient{addrs: addrs, scheme: "http://", tr: &http.Transport{}}
	if caFile != "" {
		pool, err := pki.LoadCAPool(caFile)
		if err != nil {
			return nil, fmt.Errorf("-admin-ca: %w", err)
		}
		a.scheme = "https://"
		a.tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	}
	if t := strings.TrimSpace(os.Getenv(adminapi.TokenEnv)); t != "" {
		a.token = t
	} else if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return nil, fmt.Errorf("-admin-token-file: %w", err)
		}
		a.token = strings.TrimSpace(string(b))
	}
	return a, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

func (a *adminClient) request(ctx context.Context, method, addr, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, a.scheme+addr+path, body)
	if err != nil {
		return nil, err
	}
	if method != http.MethodGet && method != http.MethodHead {
		// The admin API takes changes only as JSON, body-less ones too.
		req.Header.Set("Content-Type", "application/json")
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	return req, nil
}

// do sends req. A redirect (a node that cannot change namespaces points
// at the one that can) keeps the token towards a node of -admin or the
// same host (never from HTTPS down to plain HTTP), or, over HTTPS, any
// server whose certificate the CA verified; elsewhere it is followed
// without the token.
func (a *adminClient) do(req *http.Request, timeout time.Duration) (*http.Response, error) {
	cl := http.Client{
		Timeout:   timeout,
		Transport: a.tr,
		CheckRedirect: func(r *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			r.Header.Del("Authorization")
			downgrade := via[0].URL.Scheme == "https" && r.URL.Scheme != "https"
			trusted := r.URL.Scheme == "https" && a.tr.TLSClientConfig != nil ||
				!downgrade && (slices.Contains(a.addrs, r.URL.Host) || r.URL.Hostname() == via[0].URL.Hostname())
			if a.token != "" && trusted {
				r.Header.Set("Authorization", "Bearer "+a.token)
			}
			return nil
		},
	}
	return cl.Do(req)
}

// certsCmd writes a development CA, node certificates, an admin token and
// a gossip key into dir.
func certsCmd(p printer, dir, cluster string, nodes int, hosts []string) error {
	files, err := pki.WriteDev(dir, pki.DevOptions{Cluster: cluster, Nodes: nodes, Hosts: hosts})
	if err != nil {
		return err
	}
	if files == nil {
		files = []string{}
	}
	return p.emit(filesOutput{Wrote: files})
}

// certsNodeCmd issues one node's certificate from the CA in dir (a node
// added to a running cluster, or a renewal).
func certsNodeCmd(p printer, dir string, o pki.NodeOptions) error {
	files, err := pki.WriteNode(dir, o)
	if err != nil {
		return err
	}
	return p.emit(filesOutput{Wrote: files})
}

// certsClientCmd issues a client certificate for a namespace from the CA
// in dir.
func certsClientCmd(p printer, dir string, o pki.ClientOptions) error {
	files, err := pki.WriteClient(dir, o)
	if err != nil {
		return err
	}
	return p.emit(filesOutput{Wrote: files})
}

// errNoNode is change's error when no node could carry the request out:
// each was unreachable or answered 503.
var errNoNode = errors.New("no node could do it")

// change sends a request that one node must carry out to the nodes in
// turn: an unreachable node, or one that answers 503 (it cannot do it and
// knows no node that can), is passed over for the next. It returns the
// first other answer's status and body, read whole; an error if no node
// gave one (the last node's reason in it).
func (a *adminClient) change(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	return a.changeWithin(ctx, method, path, body, 15*time.Second)
}

// changeWithin is change with each node's request bounded by timeout.
func (a *adminClient) changeWithin(ctx context.Context, method, path string, body []byte, timeout time.Duration) (int, []byte, error) {
	var lastErr error
	for _, addr := range a.addrs {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := a.request(ctx, method, addr, path, rd)
		if err != nil {
			return 0, nil, err
		}
		resp, err := a.do(req, timeout)
		if err != nil {
			lastErr = err
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close() // read to the end: nothing to report
		if resp.StatusCode == http.StatusServiceUnavailable {
			lastErr = fmt.Errorf("%s: %s", addr, strings.TrimSpace(string(b)))
			continue
		}
		return resp.StatusCode, b, nil
	}
	return 0, nil, fmt.Errorf("%w: %w", errNoNode, lastErr)
}
