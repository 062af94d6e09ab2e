package registry

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// adminCallTimeout bounds one admin request that is not a stream.
const adminCallTimeout = 15 * time.Second

// adminClient calls a cluster's admin endpoints (a lock cluster's, where
// the registry installs verifiers and takes a move's steps, or the meta
// cluster's, where it records moves): HTTPS verified against the
// cluster's CA when it has one, the bearer token on every request, and on
// a redirect too when it points at one of the cluster's admin addresses
// or the same host (never from HTTPS down to plain HTTP), or an HTTPS
// server the cluster's CA verified.
type adminClient struct {
	name   string
	addrs  []string
	scheme string
	token  string
	hc     *http.Client
}

// errAdminStatus is an admin answer with a status the caller did not
// want; adminStatus unwraps it.
type errAdminStatus struct {
	addr   string
	status int
	body   string
}

func (e *errAdminStatus) Error() string {
	return fmt.Sprintf("%s: HTTP %d: %s", e.addr, e.status, e.body)
}

// adminStatus returns the HTTP status of an answer err reports, 0 when
// err is not one.
func adminStatus(err error) int {
	var e *errAdminStatus
	if errors.As(err, &e) {
		return e.status
	}
	return 0
}

// newAdminClient returns a client of the admin endpoints at addrs. caPEM
// "" means plain HTTP.
func newAdminClient(name string, addrs []string, caPEM, token string) (*adminClient, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: 8, IdleConnTimeout: 30 * time.Second}
	a := &adminClient{name: name, addrs: slices.Clone(addrs), scheme: "http://", token: token}
	if caPEM != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(caPEM)) {
			return nil, fmt.Errorf("cluster %q: its CA holds no PEM certificate", name)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		a.scheme = "https://"
	}
	a.hc = &http.Client{Transport: tr, CheckRedirect: func(r *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("too many redirects")
		}
		r.Header.Del("Authorization")
		downgrade := via[0].URL.Scheme == "https" && r.URL.Scheme != "https"
		trusted := r.URL.Scheme == "https" && caPEM != "" ||
			!downgrade && (slices.Contains(a.addrs, r.URL.Host) || r.URL.Hostname() == via[0].URL.Hostname())
		if token != "" && trusted {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		return nil
	}}
	return a, nil
}

// close lets go of the client's idle connections.
func (a *adminClient) close() { a.hc.CloseIdleConnections() }

// do sends one request to the cluster's nodes in turn until one answers
// a status of want, and returns that answer's body (up to 1 MiB). A
// node that cannot be reached, or answers 503 (it cannot do it and knows
// no node that can), passes to the next; another status ends the call
// with an error that adminStatus reads.
func (a *adminClient) do(ctx context.Context, method, path string, body []byte, want ...int) ([]byte, error) {
	var errs []error
	for _, addr := range a.addrs {
		b, err := a.doAt(ctx, addr, method, path, body, want)
		if err == nil {
			return b, nil
		}
		errs = append(errs, err)
		if s := adminStatus(err); s != 0 && s != http.StatusServiceUnavailable {
			break
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("cluster %q: %w", a.name, errors.Join(errs...))
}

func (a *adminClient) doAt(ctx context.Context, addr, method, path string, body []byte, want []int) ([]byte, error) {
	rctx, cancel := context.WithTimeout(ctx, adminCallTimeout)
	defer cancel()
	resp, err := a.send(rctx, addr, method, path, body)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }() // read: nothing more to report
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	if !slices.Contains(want, resp.StatusCode) {
		return nil, &errAdminStatus{addr: addr, status: resp.StatusCode, body: strings.TrimSpace(string(b))}
	}
	return b, nil
}

func (a *adminClient) send(ctx context.Context, addr, method, path string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.scheme+addr+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil || method != http.MethodGet {
		// The admin API takes changes only as JSON, body-less ones too.
		req.Header.Set("Content-Type", "application/json")
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	return a.hc.Do(req)
}

// stream sends a GET to the cluster's nodes in turn until one answers
// 200, and hands its body to fn while it streams (ctx bounds the whole).
func (a *adminClient) stream(ctx context.Context, path string, fn func(io.Reader) error) error {
	var errs []error
	for _, addr := range a.addrs {
		resp, err := a.send(ctx, addr, http.MethodGet, path, nil)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			_ = resp.Body.Close()
			errs = append(errs, &errAdminStatus{addr: addr, status: resp.StatusCode, body: strings.TrimSpace(string(b))})
			if resp.StatusCode != http.StatusServiceUnavailable {
				break
			}
			continue
		}
		err = fn(resp.Body)
		_ = resp.Body.Close()
		return err
	}
	return fmt.Errorf("cluster %q: %w", a.name, errors.Join(errs...))
}
