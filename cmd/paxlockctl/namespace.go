// This file is the namespace command: list, add and remove namespaces,
// and set their quotas, through the admin endpoint.

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/paxlock/paxlock/adminapi"
)

// namespaceCmd lists, adds or removes namespaces through any node's admin
// endpoint (a node that cannot make the change redirects to one that can).
// args is already checked; secret is the new namespace's (add).
func namespaceCmd(ctx context.Context, p printer, ac *adminClient, args []string, secret string) error {
	method, path, body := http.MethodGet, "/namespaces", []byte(nil)
	switch args[0] {
	case "add":
		method = http.MethodPost
		body, _ = json.Marshal(map[string]string{"name": args[1], "secret": secret})
	case "remove":
		method, path = http.MethodDelete, "/namespaces?name="+url.QueryEscape(args[1])
	}
	code, b, err := ac.change(ctx, method, path, body)
	switch {
	case err != nil:
		return fmt.Errorf("namespace %s: %w", args[0], err)
	case code == http.StatusOK && args[0] == "list":
		names := []string{}
		if err := json.Unmarshal(b, &names); err != nil {
			return err
		}
		qs, err := listQuotas(ctx, ac)
		if err != nil {
			return fmt.Errorf("namespace list: %w", err)
		}
		return p.emit(namespacesOutput{Namespaces: names, Quotas: qs})
	case code == http.StatusNoContent:
		return p.emit(namespaceChange{Namespace: args[1], Action: args[0], Done: true})
	}
	return fmt.Errorf("namespace %s: HTTP %d: %s", args[0], code, strings.TrimSpace(string(b)))
}

// quotaFlag is one limit of namespace set-quota: an int64 flag that
// remembers whether it was given, so that set-quota changes only the
// limits named and keeps the others.
type quotaFlag struct {
	v   int64
	set bool
}

func (f *quotaFlag) String() string { return strconv.FormatInt(f.v, 10) }

func (f *quotaFlag) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return fmt.Errorf("want a count, 0 for unlimited: %q", s)
	}
	f.v, f.set = v, true
	return nil
}

// quotaFlags are namespace set-quota's -held, -waiters, -rate and -burst.
type quotaFlags struct{ held, waiters, rate, burst quotaFlag }

func addQuotaFlags(fs *flag.FlagSet, q *quotaFlags) {
	fs.Var(&q.held, "held", "namespace set-quota: the most holders (`N`) the namespace has at once, cluster-wide: each writer, each reader of a read lock, each holder of semaphore permits (0: unlimited)")
	fs.Var(&q.waiters, "waiters", "namespace set-quota: the most blocked acquires (`N`) the namespace queues at once, cluster-wide (0: unlimited)")
	fs.Var(&q.rate, "rate", "namespace set-quota: the most new requests per second (`N`) (acquires, state queries, watches), cluster-wide (0: unlimited)")
	fs.Var(&q.burst, "burst", "namespace set-quota: the requests (`N`) above -rate that may pass at once (0: the rate)")
}

func (q *quotaFlags) given() bool { return q.held.set || q.waiters.set || q.rate.set || q.burst.set }

// apply overrides cur's limits with those given.
func (q *quotaFlags) apply(cur adminapi.NamespaceQuota) adminapi.NamespaceQuota {
	for _, f := range []struct {
		flag *quotaFlag
		dst  *int64
	}{{&q.held, &cur.Held}, {&q.waiters, &cur.Waiters}, {&q.rate, &cur.Rate}, {&q.burst, &cur.Burst}} {
		if f.flag.set {
			*f.dst = f.flag.v
		}
	}
	if cur.Rate == 0 {
		cur.Burst = 0 // a burst means nothing without a rate
	}
	return cur
}

// setQuota changes namespace ns's quota: the limits given, the others as
// they are (read first from any node).
func setQuota(ctx context.Context, p printer, ac *adminClient, ns string, q *quotaFlags) error {
	path := "/namespaces/" + url.PathEscape(ns) + "/quota"
	code, b, err := ac.change(ctx, http.MethodGet, path, nil)
	if err != nil {
		return fmt.Errorf("namespace set-quota: %w", err)
	}
	if code != http.StatusOK {
		return fmt.Errorf("namespace set-quota: HTTP %d: %s", code, strings.TrimSpace(string(b)))
	}
	var cur adminapi.QuotaStatus
	if err := json.Unmarshal(b, &cur); err != nil {
		return fmt.Errorf("namespace set-quota: %w", err)
	}
	next := q.apply(cur.Quota)
	body, _ := json.Marshal(next)
	code, b, err = ac.change(ctx, http.MethodPut, path, body)
	switch {
	case err != nil:
		return fmt.Errorf("namespace set-quota: %w", err)
	case code != http.StatusNoContent:
		return fmt.Errorf("namespace set-quota: HTTP %d: %s", code, strings.TrimSpace(string(b)))
	}
	return p.emit(quotaChange{Namespace: ns, Quota: next, Done: true})
}

// listQuotas reads GET /namespaces/quotas from any node; a node that
// does not know the endpoint (a version without quotas) has none.
func listQuotas(ctx context.Context, ac *adminClient) ([]adminapi.QuotaStatus, error) {
	code, b, err := ac.change(ctx, http.MethodGet, "/namespaces/quotas", nil)
	if err != nil {
		return nil, err
	}
	switch code {
	case http.StatusNotFound:
		return []adminapi.QuotaStatus{}, nil
	case http.StatusOK:
	default:
		return nil, fmt.Errorf("quotas: HTTP %d: %s", code, strings.TrimSpace(string(b)))
	}
	qs := []adminapi.QuotaStatus{}
	return qs, json.Unmarshal(b, &qs)
}

// quotaChange is namespace set-quota's output.
type quotaChange struct {
	Namespace string                  `json:"namespace"`
	Quota     adminapi.NamespaceQuota `json:"quota"`
	Done      bool                    `json:"done"`
}

func (o quotaChange) table(w io.Writer) error {
	_, err := fmt.Fprintf(w, "namespace %s: quota set: %s\n", o.Namespace, quotaText(o.Quota))
	return err
}

// quotaText shows a quota's limits, "unlimited" for those at 0.
func quotaText(q adminapi.NamespaceQuota) string {
	lim := func(v int64) string {
		if v == 0 {
			return "unlimited"
		}
		return strconv.FormatInt(v, 10)
	}
	burst := lim(q.Burst)
	if q.Burst == 0 && q.Rate > 0 {
		burst = "= rate"
	}
	return fmt.Sprintf("held %s, waiters %s, rate %s/s, burst %s", lim(q.Held), lim(q.Waiters), lim(q.Rate), burst)
}
