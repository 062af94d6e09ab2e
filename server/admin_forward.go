package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/paxlock/paxlock/server/adminhttp"
)

// maxForwardAnswer bounds a peer's answer to a forwarded admin request
// (a lock's detail lists at most adminapi.MaxDetailEntries holders and
// waiters).
const maxForwardAnswer = 8 << 20

// Forward implements adminhttp.ForwardNode over the console's client:
// HTTPS verified against the cluster CA when the admin endpoint is HTTPS,
// this node's admin token, redirects returned, not followed.
func (n adminNode) Forward(ctx context.Context, id uint32, method, uri string, body []byte) (adminhttp.Forwarded, error) {
	addr := n.adminAddr(id)
	if addr == "" {
		return adminhttp.Forwarded{}, errors.New("no admin address known")
	}
	scheme := "http://"
	if n.sec.adminTLS != nil {
		scheme = "https://"
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, scheme+addr+uri, rd)
	if err != nil {
		return adminhttp.Forwarded{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if n.sec.adminToken != "" {
		req.Header.Set("Authorization", "Bearer "+n.sec.adminToken)
	}
	// ctx bounds it: a force-unlock waits for its holders longer than
	// the console client's timeout for a status.
	hc := *n.consoleClient()
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil {
		return adminhttp.Forwarded{}, err
	}
	defer func() { _ = resp.Body.Close() }() // read below
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxForwardAnswer))
	if err != nil {
		return adminhttp.Forwarded{}, fmt.Errorf("read the answer: %w", err)
	}
	return adminhttp.Forwarded{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: b}, nil
}
