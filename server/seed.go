package server

import (
	"context"
	"time"

	"github.com/paxlock/paxlock/group"
)

// installNamespaces installs namespaces into the replicated table (see
// initNamespaces). It is a variable so that tests can make it fail.
var installNamespaces = (*group.Service).InitNamespaces

// initNamespaces installs the configured namespaces into the replicated
// table of a new cluster; it runs (in the background, see goBackground)
// when this node becomes master of group 0. It tries again, with backoff,
// while this node still serves group 0: a proposal can fail when a loaded
// machine stalls the round past the lease or placement moves the group
// mid-way, and onMaster may not fire again. Shutdown ends it at once.
func (s *Server) initNamespaces() {
	if !s.initingNS.CompareAndSwap(false, true) {
		return // a loop is already at it
	}
	defer s.initingNS.Store(false)
	s.seedSystem("the configured namespaces", s.svc.NamespacesInitialised, func(ctx context.Context) error {
		return installNamespaces(s.svc, ctx, s.seedVerifiers)
	})
}

// seedSystem installs what a new cluster seeds into the namespace group
// (what names it in logs): while this node masters that group and done
// reports false, it calls install, each try bounded by 10 s, retrying
// with backoff until it succeeds or the server shuts down.
func (s *Server) seedSystem(what string, done func() bool, install func(ctx context.Context) error) {
	wait := 50 * time.Millisecond
	for !done() && s.svc.Group(group.NamespaceGroup).Serving() {
		ctx, cancel := context.WithTimeout(s.life, 10*time.Second)
		err := install(ctx)
		cancel()
		if err == nil || s.life.Err() != nil {
			return
		}
		s.log.Warn("installing "+what, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-s.life.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}
