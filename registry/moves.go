package registry

// This file drives namespace moves (docs/design.md, "Moving a
// namespace"). Every registry process with the meta cluster's admin
// addresses runs a moveRunner; the one that holds the mover lock, a
// paxlock lock in the meta cluster, drives every unfinished move of the
// tables with registry/mover, each step recorded in the meta cluster and
// fenced by the lock's token. Losing the lock (a stall, a partition)
// ends the driving at once; another registry takes the lock and resumes
// every move at its recorded step.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/registry/mover"
)

// MoverLockKey is the key of the mover lock in the meta cluster's
// registry namespace.
const MoverLockKey = "paxlock/mover"

// defaultMoverTTL is MetaConfig.MoverTTL's default.
const defaultMoverTTL = 10 * time.Second

// moveRunner drives moves while this registry holds the mover lock. Its
// state belongs to its goroutine (run), apart from wake.
type moveRunner struct {
	s    *Standalone
	wake chan struct{}
	// token is the mover lock's token while this registry holds it, 0
	// otherwise (read by the status endpoint).
	token atomic.Uint64
}

func (r *moveRunner) init(s *Standalone) { r.s, r.wake = s, make(chan struct{}, 1) }

// ttl is the mover lock's TTL.
func (r *moveRunner) ttl() time.Duration {
	if m := r.s.cfg.Meta; m != nil && m.MoverTTL > 0 {
		return m.MoverTTL
	}
	return defaultMoverTTL
}

// kick asks for a pass over the moves (the tables changed).
func (r *moveRunner) kick() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// run competes for the mover lock until the registry shuts down.
func (r *moveRunner) run() {
	s := r.s
	defer s.wg.Done()
	if s.cfg.Meta == nil || len(s.cfg.Meta.Admin) == 0 {
		return
	}
	backoff := s.cfg.ReconnectMin
	for s.ctx.Err() == nil {
		start := time.Now()
		err := r.lead(s.ctx)
		if s.ctx.Err() != nil {
			return
		}
		s.log.Warn("registry: not driving namespace moves; trying again", "err", err)
		if time.Since(start) > r.ttl() {
			backoff = s.cfg.ReconnectMin
		}
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, s.cfg.ReconnectMax)
	}
}

// errLockLost ends a registry's driving when its mover lock ends.
var errLockLost = errors.New("the mover lock was lost")

// lead takes the mover lock (waiting while another registry holds it)
// and drives the moves until the lock is lost or ctx ends.
func (r *moveRunner) lead(ctx context.Context) error {
	s, meta := r.s, r.s.cfg.Meta
	cl, err := client.New(ctx, client.Config{Registry: meta.Addrs, Namespace: meta.Namespace, Secret: meta.Secret, TLS: meta.TLS, Logger: s.log})
	if err != nil {
		return fmt.Errorf("connecting to the meta cluster: %w", err)
	}
	defer func() { _ = cl.Close() }()
	mu := cl.Mutex(MoverLockKey, client.TTL(r.ttl()), client.AutoRenew())
	if err := mu.Lock(ctx); err != nil {
		return fmt.Errorf("taking the mover lock: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = mu.Unlock(uctx)
	}()
	held, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(mu.Context(), cancel)
	defer stop()
	token := mu.Token()
	r.token.Store(token)
	defer r.token.Store(0)
	s.log.Info("registry: driving namespace moves", "token", token)
	tab, err := s.metaTable()
	if err != nil {
		return err
	}
	var retry <-chan time.Time
	backoff := s.cfg.ReconnectMin
	for {
		if r.pass(held, tab, token) {
			retry, backoff = nil, s.cfg.ReconnectMin
		} else {
			retry = time.After(backoff/2 + rand.N(backoff/2+1))
			backoff = min(backoff*2, s.cfg.ReconnectMax)
		}
		select {
		case <-held.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errLockLost
		case <-r.wake:
		case <-retry:
		}
	}
}

// pass drives every unfinished move of the tables to its end; it reports
// whether all ended.
func (r *moveRunner) pass(ctx context.Context, tab mover.Table, token uint64) bool {
	s := r.s
	s.tmu.RLock()
	t := s.tables
	s.tmu.RUnlock()
	if t == nil {
		return true
	}
	ok := true
	for _, rm := range t.Moves {
		st := adminapi.MoveState(rm.State)
		if st.Finished() {
			continue
		}
		m := mover.Move{Namespace: rm.Namespace, From: rm.From, To: rm.To, ID: rm.ID, State: mover.State(st.String())}
		s.log.Info("registry: driving a namespace move", "namespace", m.Namespace, "from", m.From, "to", m.To, "move", m.ID, "state", m.State)
		start := time.Now()
		end, err := mover.Drive(ctx, m, tab, s.clusterFinder(), token)
		if err != nil {
			s.log.Warn("registry: namespace move stopped; it resumes at its recorded step", "namespace", m.Namespace, "state", end.State, "err", err)
			ok = false
			continue
		}
		s.log.Info("registry: namespace move ended", "namespace", m.Namespace, "state", end.State, "took", time.Since(start))
	}
	return ok
}

// metaTable implements mover.Table: records go to the meta cluster's
// admin API (PUT /registry/moves/{ns}), verifiers come from the tables.
type metaTable struct {
	s *Standalone
	a *adminClient
}

func (s *Standalone) metaTable() (*metaTable, error) {
	m := s.cfg.Meta
	token := m.AdminToken
	if token == "" {
		token = s.cfg.AdminToken
	}
	a, err := newAdminClient("meta", m.Admin, m.AdminCA, token)
	if err != nil {
		return nil, err
	}
	return &metaTable{s: s, a: a}, nil
}

func (t *metaTable) PutMove(ctx context.Context, m mover.Move, token uint64) error {
	var st adminapi.MoveState
	if err := st.UnmarshalText([]byte(m.State)); err != nil {
		return err
	}
	b, err := json.Marshal(adminapi.RegistryMove{Namespace: m.Namespace, ID: m.ID, From: m.From, To: m.To, State: st, Token: token})
	if err != nil {
		return err
	}
	_, err = t.a.do(ctx, http.MethodPut, "/registry/moves/"+url.PathEscape(m.Namespace), b, http.StatusNoContent, http.StatusOK)
	if adminStatus(err) == http.StatusConflict {
		return fmt.Errorf("%w: %w", mover.ErrFenced, err)
	}
	return err
}

func (t *metaTable) Verifier(_ context.Context, ns string) (adminapi.Verifier, error) {
	t.s.tmu.RLock()
	defer t.s.tmu.RUnlock()
	if t.s.tables != nil {
		for _, n := range t.s.tables.Namespaces {
			if n.Name == ns {
				v := verifierOf(n)
				return adminapi.Verifier{Iters: v.Iters, Salt: v.Salt, StoredKey: v.StoredKey, ServerKey: v.ServerKey}, nil
			}
		}
	}
	return adminapi.Verifier{}, fmt.Errorf("namespace %q is not in the registry's tables", ns)
}
