// This file is unlock --force: an operator's revocation of a lock, through
// any node's admin endpoint.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/paxlock/paxlock/adminapi"
)

// forceUnlock frees key of namespace ns through any node's admin endpoint
// (one that does not serve the key's group redirects to the one that does).
// While the key's group has no master (an election) every node answers
// 503: it tries again, with backoff, until a node can do it or timeout
// has passed, as lock and wait wait for masters. A 202 (a holder revoked
// but not acknowledged yet) is asked again the same way.
func forceUnlock(ctx context.Context, p printer, ac *adminClient, ns, key string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, _ := json.Marshal(map[string]string{"namespace": ns, "key": key})
	var done []adminapi.ReleasedHold // removed by earlier answers (202)
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		code, b, err := ac.change(ctx, http.MethodPost, "/locks/unlock", body)
		switch {
		case errors.Is(err, errNoNode) && ctx.Err() == nil:
			select {
			case <-ctx.Done():
			case <-time.After(delay):
			}
			continue
		case errors.Is(err, errNoNode):
			return fmt.Errorf("unlock: no master for the key's group within %v: %w", timeout, err)
		case err != nil:
			return fmt.Errorf("unlock: %w", err)
		case code == http.StatusOK || code == http.StatusAccepted:
			var out adminapi.ForceUnlocked
			if err := json.Unmarshal(b, &out); err != nil {
				return fmt.Errorf("unlock: %w", err)
			}
			done = append(done, out.Released...)
			if !out.Pending {
				out.Released = done
				return p.emit(unlockOutput(out))
			}
			// Revoked, its holder has not acknowledged yet: ask again,
			// which waits on the same revocation, until -timeout.
			if ctx.Err() != nil {
				return fmt.Errorf("unlock: %s/%s: revoked, but its holder has not acknowledged within %v; the cluster frees it when the holder does or its TTL runs out (released so far: %d holds)", ns, key, timeout, len(done))
			}
			continue
		}
		return fmt.Errorf("unlock: HTTP %d: %s", code, strings.TrimSpace(string(b)))
	}
}
