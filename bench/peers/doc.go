// Package peers adapts the lock services paxlock is compared with — Redis,
// etcd and ZooKeeper — and paxlock itself to load.Locker. Each adapter uses
// the system's usual Go client and its usual lock recipe, as an application
// would; the servers are the ones bench/scripts/peers.sh starts on loopback.
//
// # Files by job
//
//   - peers.go: Config and the addresses bench/scripts/peers.sh uses.
//   - paxlock.go: paxlock, through its Go client.
//   - redis.go: Redis, SET NX PX and scripts that release or extend only
//     the caller's own hold; waits poll.
//   - etcd.go: etcd, concurrency.Mutex over one session per worker.
//   - zk.go: ZooKeeper, the go-zookeeper lock recipe.
package peers
