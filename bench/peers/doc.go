// Package peers adapts the lock services paxlock is compared with — Redis,
// etcd and ZooKeeper — and paxlock itself to load.Locker. Each adapter uses
// the system's usual Go client and its usual lock recipe, as an application
// would; the servers are the ones bench/scripts/peers.sh starts on loopback.
package peers
