package peers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/paxlock/paxlock/bench/load"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// etcd's own lock recipe: concurrency.Mutex over a concurrency.Session per
// worker. Every worker's session is one lease, kept alive by the client;
// locks are keys under the lease, granted in creation-revision order, and a
// waiter watches only its predecessor's deletion.
type etcdLocker struct {
	cli *clientv3.Client
	ttl int // session TTL, seconds
}

// OpenEtcd connects one client (multiplexed over gRPC, balanced over the
// members) to cfg.EtcdEndpoints.
func OpenEtcd(ctx context.Context, cfg Config) (load.Locker, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.EtcdEndpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		Context:     context.WithoutCancel(ctx),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd at %v: %w", cfg.EtcdEndpoints, err)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// A quorum read proves there is a leader.
	if _, err := cli.Get(sctx, "pxb/ping"); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("etcd at %v: %w (is it running? bench/scripts/peers.sh start etcd)", cfg.EtcdEndpoints, err)
	}
	return &etcdLocker{cli: cli, ttl: ttlSeconds(cfg.TTL)}, nil
}

func (e *etcdLocker) Name() string    { return "etcd" }
func (e *etcdLocker) Display() string { return "etcd" }

func (e *etcdLocker) Caps() load.Caps {
	return load.Caps{
		Renew:   true,
		Fencing: true,
		Wait:    "server watch on the predecessor's key",
		Notes: []string{
			fmt.Sprintf("3 members, each with GOMAXPROCS cores/3 (at least 1); concurrency.Mutex, one session (lease, TTL %ds) per worker", e.ttl),
			"renew = KeepAliveOnce of the worker's session lease",
			"token = revision of the acquire's response header",
		},
	}
}

func (e *etcdLocker) Version(ctx context.Context) (string, error) {
	eps := e.cli.Endpoints()
	if len(eps) == 0 {
		return "", errors.New("etcd: no endpoints")
	}
	st, err := e.cli.Status(ctx, eps[0])
	if err != nil {
		return "", err
	}
	return st.Version, nil
}

func (e *etcdLocker) NewSession(ctx context.Context, _ int) (load.Session, error) {
	// The session's context must outlive the call (it drives the lease's
	// keep-alive), so only the grant is bounded by ctx, through a goroutine.
	type result struct {
		s   *concurrency.Session
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := concurrency.NewSession(e.cli, concurrency.WithTTL(e.ttl))
		ch <- result{s, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, etcdErr(ctx, r.err)
		}
		return &etcdSession{e: e, s: r.s}, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.err == nil {
				_ = r.s.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

func (e *etcdLocker) Close() error { return e.cli.Close() }

type etcdSession struct {
	e *etcdLocker
	s *concurrency.Session
}

func (s *etcdSession) Acquire(ctx context.Context, req load.Request) (load.Lease, error) {
	if req.Mode != load.Exclusive {
		return load.Lease{}, load.ErrUnsupported
	}
	m := concurrency.NewMutex(s.s, "/pxb/"+req.Key)
	if err := m.Lock(ctx); err != nil {
		return load.Lease{}, etcdErr(ctx, err)
	}
	var tok uint64
	if h := m.Header(); h != nil {
		tok = uint64(h.Revision)
	}
	return load.Lease{Key: req.Key, Mode: req.Mode, Token: tok, Fresh: req.Fresh, Handle: m}, nil
}

func (s *etcdSession) Renew(ctx context.Context, _ load.Lease, _ time.Duration) error {
	if _, err := s.e.cli.KeepAliveOnce(ctx, s.s.Lease()); err != nil {
		return etcdErr(ctx, err)
	}
	return nil
}

func (s *etcdSession) Release(ctx context.Context, l load.Lease) error {
	m := l.Handle.(*concurrency.Mutex)
	if err := m.Unlock(ctx); err != nil {
		return etcdErr(ctx, err)
	}
	return nil
}

func (s *etcdSession) Close(ctx context.Context) error {
	// Stop the keep-alive and revoke the lease, deleting any key it still
	// holds, rather than leaving it to expire.
	s.s.Orphan()
	_, err := s.e.cli.Revoke(ctx, s.s.Lease())
	return err
}

// etcdErr maps etcd's errors onto the harness's kinds.
func etcdErr(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		return fmt.Errorf("etcd: %w (%v)", ctx.Err(), err)
	case errors.Is(err, concurrency.ErrSessionExpired), errors.Is(err, rpctypes.ErrLeaseNotFound):
		return fmt.Errorf("etcd: %w: %v", load.ErrNotHeld, err)
	case errors.Is(err, rpctypes.ErrTimeout), errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail),
		errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost):
		return fmt.Errorf("etcd: %w: %v", context.DeadlineExceeded, err)
	case errors.Is(err, rpctypes.ErrNoLeader):
		return fmt.Errorf("etcd: %w: %v", load.ErrUnavailable, err)
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable {
		return fmt.Errorf("etcd: %w: %v", load.ErrUnavailable, err)
	}
	return fmt.Errorf("etcd: %w", err)
}
