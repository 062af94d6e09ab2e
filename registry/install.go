// This file installs the namespaces' verifiers on their lock clusters:
// from the meta cluster's tables, through each cluster's admin API (POST
// /namespaces with the verifier), so that a namespace's secret is never
// copied by hand and never leaves the node it was given to.

package registry

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/url"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
)

// installer keeps each namespace's verifier installed on the cluster the
// tables assign it to. Every registry process does the same work; an
// install is idempotent (the same verifier written again), so several
// registries agree. Its state belongs to its goroutine (run), apart from
// wake.
type installer struct {
	s    *Standalone
	wake chan struct{}
	// done maps each namespace to the cluster and verifier this process
	// installed it with.
	done map[string]installed
}

type installed struct {
	cluster string
	v       scramauth.Verifier
}

func (in *installer) init(s *Standalone) {
	in.s, in.wake, in.done = s, make(chan struct{}, 1), map[string]installed{}
}

// kick asks for a pass over the tables.
func (in *installer) kick() {
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// run installs after every change of the tables, retrying what failed
// with growing backoff, until the registry shuts down. Static tables
// install nothing: their clusters hold the secrets already.
func (in *installer) run() {
	s := in.s
	defer s.wg.Done()
	if s.cfg.Meta == nil {
		return
	}
	backoff := s.cfg.ReconnectMin
	var retry <-chan time.Time
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-in.wake:
		case <-retry:
		}
		retry = nil
		if in.pass(s.ctx) {
			backoff = s.cfg.ReconnectMin
			continue
		}
		retry = time.After(backoff/2 + rand.N(backoff/2+1))
		backoff = min(backoff*2, s.cfg.ReconnectMax)
	}
}

// pass installs every namespace whose cluster or verifier changed since
// this process last installed it, and removes from its cluster a
// namespace that left the tables. It reports whether all went through.
func (in *installer) pass(ctx context.Context) bool {
	in.s.tmu.RLock()
	t := in.s.tables
	in.s.tmu.RUnlock()
	if t == nil {
		return true
	}
	clusters := map[string]wire.RegistryCluster{}
	for _, c := range t.Clusters {
		clusters[c.Name] = c
	}
	ok := true
	present := map[string]bool{}
	for _, n := range t.Namespaces {
		present[n.Name] = true
		want := installed{cluster: n.Cluster, v: verifierOf(n)}
		if d, had := in.done[n.Name]; had && d.cluster == want.cluster && d.v.Equal(want.v) {
			continue
		}
		cl := clusters[n.Cluster]
		if len(cl.Admin) == 0 {
			continue // no admin addresses: the cluster's operator installs it
		}
		v := want.v
		body, _ := json.Marshal(adminapi.NamespacePut{Name: n.Name, Verifier: &adminapi.Verifier{Iters: v.Iters, Salt: v.Salt, StoredKey: v.StoredKey, ServerKey: v.ServerKey}})
		if err := in.call(ctx, cl, http.MethodPost, "/namespaces", body, http.StatusNoContent); err != nil {
			in.s.log.Warn("registry: installing a namespace's verifier on its cluster failed; retrying", "namespace", n.Name, "cluster", n.Cluster, "err", err)
			ok = false
			continue
		}
		in.done[n.Name] = want
		in.s.log.Info("registry: namespace installed on its cluster", "namespace", n.Name, "cluster", n.Cluster)
	}
	for name, d := range in.done {
		cl, known := clusters[d.cluster]
		if present[name] || !known || len(cl.Admin) == 0 {
			if !present[name] {
				delete(in.done, name)
			}
			continue
		}
		err := in.call(ctx, cl, http.MethodDelete, "/namespaces?name="+url.QueryEscape(name), nil, http.StatusNoContent, http.StatusNotFound)
		if err != nil {
			in.s.log.Warn("registry: removing a namespace from its cluster failed; retrying", "namespace", name, "cluster", d.cluster, "err", err)
			ok = false
			continue
		}
		delete(in.done, name)
	}
	return ok
}

// call sends one admin request to the cluster's nodes (adminClient.do).
func (in *installer) call(ctx context.Context, cl wire.RegistryCluster, method, path string, body []byte, want ...int) error {
	a, err := newAdminClient(cl.Name, cl.Admin, cl.CA, in.s.cfg.AdminToken)
	if err != nil {
		return err
	}
	defer a.close()
	_, err = a.do(ctx, method, path, body, want...)
	return err
}
