package peers

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/paxlock/paxlock/bench/load"
	"github.com/paxlock/paxlock/bench/memlock"
)

// Config holds what the adapters need to reach their servers.
type Config struct {
	// TTL is given to session-based systems when a session is made.
	TTL time.Duration
	// MaxWorkers is the most workers any run will use (sizes pools).
	MaxWorkers int

	// RedisAddr is host:port of the Redis server.
	RedisAddr string
	// RedisPoll is the sleep between SET NX attempts while a key is taken.
	RedisPoll time.Duration
	// RedisAOFAddr is host:port of the Redis server that appends every
	// write to its AOF and fsyncs it before answering (appendfsync
	// always): the durable single node (system "redis-aof").
	RedisAOFAddr string

	// EtcdEndpoints are the etcd members' client URLs.
	EtcdEndpoints []string

	// ZKServers are the ZooKeeper members' host:port.
	ZKServers []string

	// Paxlock* reach a paxlock cluster (see paxlock.go).
	PaxlockRegistry  []string
	PaxlockNamespace string
	PaxlockSecret    string
	// PaxlockTLSRegistry and PaxlockCA reach the same cluster through its
	// TLS client listeners (system paxlock-tls).
	PaxlockTLSRegistry []string
	PaxlockCA          string
	// PaxlockAPI are the same cluster's Connect API listeners (api_addr;
	// system paxlock-api), TLS verified against PaxlockCA where that file
	// exists; PaxlockAPIGRPC speaks gRPC to them instead of the Connect
	// protocol. PaxlockAPINoRoute sends every call of a worker to one
	// node (worker mod nodes), ignoring the answers' routing hints.
	PaxlockAPI        []string
	PaxlockAPIGRPC    bool
	PaxlockAPINoRoute bool
}

// DefaultConfig matches bench/scripts/peers.sh and paxlock's
// scripts/cluster.sh.
func DefaultConfig() Config {
	return Config{
		TTL:          10 * time.Second,
		MaxWorkers:   64,
		RedisAddr:    "127.0.0.1:16379",
		RedisPoll:    2 * time.Millisecond,
		RedisAOFAddr: "127.0.0.1:16380",
		EtcdEndpoints: []string{
			"http://127.0.0.1:12379", "http://127.0.0.1:22379", "http://127.0.0.1:32379",
		},
		ZKServers: []string{"127.0.0.1:12181", "127.0.0.1:22181", "127.0.0.1:32181"},
		// The cluster of scripts/cluster.sh (make run, make bench).
		PaxlockRegistry:    []string{"127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"},
		PaxlockNamespace:   "default",
		PaxlockSecret:      "paxlock",
		PaxlockTLSRegistry: []string{"127.0.0.1:7111", "127.0.0.1:7112", "127.0.0.1:7113"},
		PaxlockAPI:         []string{"127.0.0.1:7121", "127.0.0.1:7122", "127.0.0.1:7123"},
	}
}

// Names lists the systems Open knows, in report order; "mem" is the
// in-memory fake.
var Names = []string{"paxlock", "paxlock-lq", "paxlock-tls", "paxlock-api", "redis", "redis-aof", "etcd", "zk", "mem"}

// Open connects to the named system and checks that it answers. A system
// whose adapter is a placeholder returns an error wrapping load.ErrNotBuilt.
func Open(ctx context.Context, name string, cfg Config) (load.Locker, error) {
	switch strings.ToLower(name) {
	case "paxlock":
		return OpenPaxlock(ctx, cfg)
	case "paxlock-lq":
		return OpenPaxlockLocalQueue(ctx, cfg)
	case "paxlock-tls":
		return OpenPaxlockTLS(ctx, cfg)
	case "paxlock-api":
		return OpenPaxlockAPI(ctx, cfg)
	case "redis":
		return OpenRedis(ctx, cfg)
	case "redis-aof":
		return OpenRedisAOF(ctx, cfg)
	case "etcd":
		return OpenEtcd(ctx, cfg)
	case "zk", "zookeeper":
		return OpenZK(ctx, cfg)
	case "mem":
		return memlock.New(memlock.Options{}), nil
	}
	return nil, fmt.Errorf("unknown system %q (want one of %s)", name, strings.Join(Names, ", "))
}

// ttlSeconds rounds a TTL up to whole seconds, at least 1.
func ttlSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}
