// This file is locks and state through the admin endpoints: an operator
// with the admin token reads any namespace's locks (GET /locks, GET
// /locks/{ns}/{key}) without the namespace's secret.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/paxlock/paxlock/adminapi"
)

// viaAdmin reports whether locks and state read through the admin
// endpoints: the admin token is given (PAXLOCK_ADMIN_TOKEN, or
// -admin-token-file on the command line or from the environment) and
// the namespace secret is not (neither PAXLOCK_SECRET nor -secret-file).
func (o *options) viaAdmin() bool {
	token := os.Getenv(adminapi.TokenEnv) != "" || o.tokenFile != ""
	secret := os.Getenv(SecretEnv) != "" || o.secretFile != ""
	return token && !secret
}

// getJSON asks the admin endpoints for path in turn, passing over a node
// that is unreachable or answers 503, and decodes the first other 200
// answer into v; a redirect (to the key's master) is followed.
func (a *adminClient) getJSON(ctx context.Context, path string, v any) error {
	var lastErr error
	for _, addr := range a.addrs {
		req, err := a.request(ctx, http.MethodGet, addr, path, nil)
		if err != nil {
			return err
		}
		resp, err := a.do(req, 10*time.Second)
		if err != nil {
			lastErr = err
			continue
		}
		if resp.StatusCode == http.StatusOK {
			err = json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(v)
			_ = resp.Body.Close() // decoded: nothing to report
			return err
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		_ = resp.Body.Close() // read: nothing to report
		lastErr = fmt.Errorf("%s: %s: %s", addr, resp.Status, strings.TrimSpace(string(b)))
		if resp.StatusCode != http.StatusServiceUnavailable {
			return lastErr
		}
	}
	return fmt.Errorf("%w: %w", errNoNode, lastErr)
}

// adminLocks is locks through GET /locks: pages until limit locks or the
// last page, printed as the client protocol's locks prints them.
func adminLocks(ctx context.Context, p printer, ac *adminClient, ns, prefix string, limit int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := locksOutput{Prefix: prefix, Locks: []stateOutput{}}
	after := ""
	for len(out.Locks) < limit {
		q := url.Values{"namespace": {ns}, "prefix": {prefix}, "after": {after},
			"limit": {strconv.Itoa(min(limit-len(out.Locks), adminapi.MaxListLimit))}}
		var page adminapi.LockPage
		if err := ac.getJSON(ctx, "/locks?"+q.Encode(), &page); err != nil {
			return err
		}
		for _, l := range page.Locks {
			st := stateOutput{Key: l.Key, Held: true, Holder: l.Holder, Token: l.Token, Kind: l.Kind, TTLLeftMs: l.TTLLeftMs,
				QueueLen: int(l.Waiters), Value: l.Value, Readers: int(l.Readers)}
			if l.Limit != 0 {
				st.Permits, st.InUse = int(l.Limit), int(l.Permits)
			}
			out.Locks = append(out.Locks, st)
		}
		after = page.Next
		if after == "" {
			break
		}
	}
	out.More = after != ""
	return p.emit(out)
}

// adminState is state through GET /locks/{ns}/{key}: every holder and
// the waiter queue.
func adminState(ctx context.Context, p printer, ac *adminClient, ns, key string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d adminapi.LockDetail
	if err := ac.getJSON(ctx, "/locks/"+url.PathEscape(ns)+"/"+url.PathEscape(key), &d); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("state %s: %w", key, err)
		}
		return err
	}
	return p.emit(lockDetailOutput{d})
}

// lockDetailOutput is state's output through the admin endpoints: the
// fields of adminapi.LockDetail (docs/operations.md lists them).
type lockDetailOutput struct{ adminapi.LockDetail }

func (o lockDetailOutput) table(w io.Writer) error {
	d := o.LockDetail
	ms := func(v int64) string { return (time.Duration(v) * time.Millisecond).String() }
	head := fmt.Sprintf("%s/%s: free", d.Namespace, d.Key)
	if d.Held {
		head = fmt.Sprintf("%s/%s: held (%s)", d.Namespace, d.Key, d.Kind)
	}
	head += fmt.Sprintf(", group %d, master node %d, %d waiting, %d watching", d.Group, d.Master, len(d.Waiters), d.Watchers)
	if d.DelayLeftMs > 0 {
		head += ", in a lock-delay for " + ms(d.DelayLeftMs)
	}
	if d.Limit > 0 {
		head += fmt.Sprintf(", %d permits in all", d.Limit)
	}
	if _, err := fmt.Fprintln(w, head); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(d.Holders) > 0 {
		fmt.Fprintln(tw, "HOLDER\tTOKEN\tTTL LEFT\tLOCK-DELAY\tPERMITS\tVALUE")
		for _, h := range d.Holders {
			left := ms(h.TTLLeftMs)
			if h.Revoked {
				left = "revoked"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%q\n", h.Owner, h.Token, left, ms(h.LockDelayMs), h.Permits, h.Value)
		}
	}
	if len(d.Waiters) > 0 {
		fmt.Fprintln(tw, "WAITER\tKIND\tWEIGHT\tWAITED\tPERMITS\t")
		for _, q := range d.Waiters {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t\n", q.Owner, q.Kind, q.Weight, ms(q.WaitedMs), q.Permits)
		}
	}
	return tw.Flush()
}
