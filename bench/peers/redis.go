package peers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/paxlock/paxlock/bench/load"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// The single-instance Redis lock: SET key owner NX PX ttl to take it, and
// scripts that act only while the key still holds the caller's owner value
// to give it back or extend it. A taken key is waited for by polling.
var (
	redisRelease = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0`)
	redisRenew = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0`)
)

type redisLocker struct {
	c    *redis.Client
	poll time.Duration
	aof  bool // the server fsyncs every write (system "redis-aof")
}

// OpenRedis connects to the Redis server at cfg.RedisAddr (no
// persistence).
func OpenRedis(ctx context.Context, cfg Config) (load.Locker, error) {
	return openRedis(ctx, cfg, cfg.RedisAddr, false)
}

// OpenRedisAOF connects to the Redis server at cfg.RedisAOFAddr, which
// appends every write to its AOF and fsyncs it before answering; it
// checks that the server is so configured.
func OpenRedisAOF(ctx context.Context, cfg Config) (load.Locker, error) {
	lk, err := openRedis(ctx, cfg, cfg.RedisAOFAddr, true)
	if err != nil {
		return nil, err
	}
	r := lk.(*redisLocker)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, err := r.c.ConfigGet(pctx, "appendfsync").Result()
	if err != nil {
		_ = r.c.Close()
		return nil, fmt.Errorf("redis-aof at %s: reading appendfsync: %w", cfg.RedisAOFAddr, err)
	}
	if got["appendfsync"] != "always" {
		_ = r.c.Close()
		return nil, fmt.Errorf("redis-aof at %s: appendfsync is %q, want always (bench/scripts/peers.sh start redis-aof)", cfg.RedisAOFAddr, got["appendfsync"])
	}
	return r, nil
}

func openRedis(ctx context.Context, cfg Config, addr string, aof bool) (load.Locker, error) {
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		PoolSize:              cfg.MaxWorkers + 4, // never make a worker wait for a connection
		MinIdleConns:          min(cfg.MaxWorkers, 64),
		DialTimeout:           5 * time.Second,
		ReadTimeout:           5 * time.Second,
		WriteTimeout:          5 * time.Second,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1, // a failure is counted, not hidden by a retry
		DisableIdentity:       true,
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	})
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("redis at %s: %w (is it running? bench/scripts/peers.sh start redis redis-aof)", addr, err)
	}
	// Load the scripts so the hot path is EVALSHA (Run falls back to EVAL).
	for _, s := range []*redis.Script{redisRelease, redisRenew} {
		if err := s.Load(pctx, c).Err(); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("redis: loading scripts: %w", err)
		}
	}
	poll := cfg.RedisPoll
	if poll <= 0 {
		poll = 2 * time.Millisecond
	}
	return &redisLocker{c: c, poll: poll, aof: aof}, nil
}

func (r *redisLocker) Name() string {
	if r.aof {
		return "redis-aof"
	}
	return "redis"
}

func (r *redisLocker) Display() string {
	if r.aof {
		return "Redis (AOF, fsync always)"
	}
	return "Redis"
}

func (r *redisLocker) Caps() load.Caps {
	persistence := "single instance, no persistence (save \"\", appendonly no)"
	if r.aof {
		persistence = "single instance, every write appended to the AOF and fsynced before the reply (appendonly yes, appendfsync always)"
	}
	return load.Caps{
		Renew: true,
		Wait:  fmt.Sprintf("client polling every ~%v", r.poll),
		Notes: []string{persistence, "no fencing token"},
	}
}

func (r *redisLocker) Version(ctx context.Context) (string, error) {
	info, err := r.c.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", errors.New("redis: no redis_version in INFO")
}

func (r *redisLocker) NewSession(_ context.Context, worker int) (load.Session, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &redisSession{
		r:     r,
		owner: hex.EncodeToString(b[:]) + "-" + strconv.Itoa(worker) + "-",
		rng:   mrand.New(mrand.NewPCG(uint64(worker), uint64(time.Now().UnixNano()))),
	}, nil
}

func (r *redisLocker) Close() error { return r.c.Close() }

type redisSession struct {
	r     *redisLocker
	owner string // unique per session; a counter makes it unique per hold
	n     uint64
	rng   *mrand.Rand
}

func (s *redisSession) Acquire(ctx context.Context, req load.Request) (load.Lease, error) {
	if req.Mode != load.Exclusive {
		return load.Lease{}, load.ErrUnsupported
	}
	s.n++
	val := s.owner + strconv.FormatUint(s.n, 10)
	for {
		ok, err := s.r.c.SetNX(ctx, req.Key, val, req.TTL).Result()
		if err != nil {
			return load.Lease{}, redisErr(ctx, err)
		}
		if ok {
			return load.Lease{Key: req.Key, Mode: req.Mode, Fresh: req.Fresh, Handle: val}, nil
		}
		// Taken: sleep a jittered poll interval and try again.
		d := s.r.poll/2 + time.Duration(s.rng.Int64N(int64(s.r.poll)+1))
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return load.Lease{}, ctx.Err()
		}
	}
}

func (s *redisSession) Renew(ctx context.Context, l load.Lease, ttl time.Duration) error {
	n, err := redisRenew.Run(ctx, s.r.c, []string{l.Key}, l.Handle, ttl.Milliseconds()).Int()
	if err != nil {
		return redisErr(ctx, err)
	}
	if n == 0 {
		return load.ErrNotHeld
	}
	return nil
}

func (s *redisSession) Release(ctx context.Context, l load.Lease) error {
	n, err := redisRelease.Run(ctx, s.r.c, []string{l.Key}, l.Handle).Int()
	if err != nil {
		return redisErr(ctx, err)
	}
	if n == 0 {
		return load.ErrNotHeld
	}
	return nil
}

func (s *redisSession) Close(context.Context) error { return nil }

// redisErr keeps context errors recognizable and marks the rest.
func redisErr(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		return fmt.Errorf("redis: %w (%v)", ctx.Err(), err)
	}
	return fmt.Errorf("redis: %w", err)
}
