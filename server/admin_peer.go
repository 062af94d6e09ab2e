package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// errPeerUnanswered wraps the failures of peerGet that got no usable
// answer from the peer (no connection, or a status other than 200), as
// against an answer that did not decode.
var errPeerUnanswered = errors.New("peer admin endpoint did not answer")

// peerGet asks node id's admin endpoint for path?vals (HTTPS verified
// against the cluster CA when the admin endpoint is HTTPS, this node's
// admin token) and decodes its JSON answer, at most 8 MiB, into out.
func (n adminNode) peerGet(ctx context.Context, id uint32, path string, vals url.Values, out any) error {
	addr := n.adminAddr(id)
	if addr == "" {
		return fmt.Errorf("%w: node %d has no admin address", errPeerUnanswered, id)
	}
	scheme := "http://"
	if n.sec.adminTLS != nil {
		scheme = "https://"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+addr+path+"?"+vals.Encode(), nil)
	if err != nil {
		return err
	}
	if n.sec.adminToken != "" {
		req.Header.Set("Authorization", "Bearer "+n.sec.adminToken)
	}
	resp, err := n.consoleClient().Do(req)
	if err != nil {
		return fmt.Errorf("%w: node %d: %w", errPeerUnanswered, id, err)
	}
	defer func() { _ = resp.Body.Close() }() // read below
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%w: node %d: %s: %s", errPeerUnanswered, id, resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(out); err != nil {
		return fmt.Errorf("node %d's answer to %s: %w", id, path, err)
	}
	return nil
}
