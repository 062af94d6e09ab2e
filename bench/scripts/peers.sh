#!/usr/bin/env bash
# peers.sh — install, start, stop and check the lock services that bench/
# compares paxlock against, all on loopback and without systemd:
#
#   Redis 7      one instance            127.0.0.1:16379
#   Redis 7 AOF  one instance, appendonly with appendfsync always (every
#                write fsynced before its reply: the durable single node)
#                                        127.0.0.1:16380
#   etcd 3.4     3 members               clients 127.0.0.1:{12379,22379,32379}
#                                        peers   127.0.0.1:{12380,22380,32380}
#   ZooKeeper    3 members (3.8)         clients 127.0.0.1:{12181,22181,32181}
#                                        quorum  127.0.0.1:{12888,22888,32888}
#                                        election 127.0.0.1:{13888,23888,33888}
#
# Usage: peers.sh start|stop|restart|status|install|clean [redis|redis-aof|etcd|zk|all ...]
#
# The ports are deliberately not the packages' defaults, so a default service
# (if one runs) never answers in place of ours. Every daemon runs in the
# background with its data, logs and pid file under $PEERS_DIR (default
# ${TMPDIR:-/tmp}/paxlock-bench-peers); `start` wipes that system's old data
# first, `clean` removes the whole directory. `install` (implied by `start`)
# installs missing Debian packages with apt-get and keeps apt from starting
# their default services.
set -euo pipefail

PEERS_DIR="${PEERS_DIR:-${TMPDIR:-/tmp}/paxlock-bench-peers}"
WAIT_SECS="${WAIT_SECS:-90}"
ZK_HEAP="${ZK_HEAP:-512m}"

REDIS_PORT=16379
REDIS_AOF_PORT=16380
ETCD_CLIENT_PORTS=(12379 22379 32379)
ETCD_PEER_PORTS=(12380 22380 32380)
ZK_CLIENT_PORTS=(12181 22181 32181)
ZK_QUORUM_PORTS=(12888 22888 32888)
ZK_ELECTION_PORTS=(13888 23888 33888)

log() { printf 'peers: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- install --

apt_updated=0
apt_install() { # packages...
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	[ "$(id -u)" -eq 0 ] || die "need root to install ${missing[*]} (or install them yourself)"
	if [ $apt_updated -eq 0 ]; then
		log "apt-get update"
		apt-get update -qq >&2
		apt_updated=1
	fi
	# Keep apt's maintainer scripts from starting the packages' own services:
	# invoke-rc.d asks /usr/sbin/policy-rc.d, and exit code 101 means "no".
	local own_policy=0
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		own_policy=1
	fi
	log "apt-get install ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
		{ [ $own_policy -eq 1 ] && rm -f /usr/sbin/policy-rc.d; die "apt-get install ${missing[*]} failed"; }
	[ $own_policy -eq 1 ] && rm -f /usr/sbin/policy-rc.d
	disable_default_services
}

# disable_default_services makes sure the packages' own daemons (on their
# default ports) are neither running nor started at boot. Best effort.
disable_default_services() {
	local svc
	for svc in redis-server etcd zookeeper; do
		if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
			systemctl disable --now "$svc" >/dev/null 2>&1 || true
		else
			[ -x "/etc/init.d/$svc" ] && "/etc/init.d/$svc" stop >/dev/null 2>&1 || true
			command -v update-rc.d >/dev/null && update-rc.d "$svc" disable >/dev/null 2>&1 || true
		fi
	done
}

install_redis() { apt_install redis-server; }
install_etcd() { apt_install etcd-server etcd-client; }
# Debian's "zookeeper" package holds the server jars; "zookeeperd" only adds
# the init/systemd service, which we do not want.
install_zk() { apt_install zookeeper; }

# ---------------------------------------------------------------- helpers --

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_pidfile() { # pidfile name
	local pf=$1 name=$2 pid i
	if ! pid_alive "$pf"; then
		rm -f "$pf"
		return 0
	fi
	pid=$(cat "$pf")
	kill -TERM "$pid" 2>/dev/null || true
	for i in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		log "$name (pid $pid) ignored SIGTERM for 10s; sending SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$pf"
	log "stopped $name (pid $pid)"
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

check_ports_free() { # system ports...
	local sys=$1 p
	shift
	for p in "$@"; do
		port_busy "$p" && die "$sys: port 127.0.0.1:$p is already in use (another instance? try: $0 stop $sys)"
	done
	return 0
}

wait_until() { # description command...
	local what=$1 i
	shift
	for i in $(seq 1 $((WAIT_SECS * 5))); do
		if "$@" >/dev/null 2>&1; then
			log "$what is up after ~$((i / 5))s"
			return 0
		fi
		sleep 0.2
	done
	die "$what did not answer within ${WAIT_SECS}s; see the logs under $PEERS_DIR"
}

# zk_4lw sends a ZooKeeper four-letter word and prints the reply.
zk_4lw() { # port word
	local reply
	exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
	printf '%s' "$2" >&3
	reply=$(timeout 2 cat <&3) || true
	exec 3<&- 3>&-
	printf '%s\n' "$reply"
}

# ------------------------------------------------------------------ redis --

redis_dir="$PEERS_DIR/redis"

start_redis() {
	install_redis
	if pid_alive "$redis_dir/redis.pid"; then
		log "redis already running (pid $(cat "$redis_dir/redis.pid"))"
		return 0
	fi
	check_ports_free redis $REDIS_PORT
	rm -rf "$redis_dir"
	mkdir -p "$redis_dir"
	# No persistence: the usual setup for a Redis lock server (and the one the
	# Redis lock recipe assumes); the report states it.
	redis-server --bind 127.0.0.1 --port $REDIS_PORT --dir "$redis_dir" \
		--save '' --appendonly no --protected-mode yes --daemonize no \
		--logfile "$redis_dir/redis.log" >/dev/null 2>&1 &
	echo $! >"$redis_dir/redis.pid"
	wait_until "redis on :$REDIS_PORT" redis_ready
}

redis_ready() { [ "$(redis-cli -h 127.0.0.1 -p $REDIS_PORT ping 2>/dev/null)" = PONG ]; }
stop_redis() { stop_pidfile "$redis_dir/redis.pid" redis; }
status_redis() {
	if pid_alive "$redis_dir/redis.pid" && redis_ready; then
		echo "redis: up (pid $(cat "$redis_dir/redis.pid"), 127.0.0.1:$REDIS_PORT, $(redis-cli -p $REDIS_PORT info server | tr -d '\r' | grep '^redis_version:'))"
	else
		echo "redis: down"
		return 1
	fi
}

# -------------------------------------------------------------- redis-aof --

# The durable single node users compare a lock service against: every
# write is appended to the AOF and fsynced before Redis answers it.
redis_aof_dir="$PEERS_DIR/redis-aof"

install_redis-aof() { install_redis; }

start_redis-aof() {
	if pid_alive "$redis_aof_dir/redis.pid"; then
		log "redis-aof already running (pid $(cat "$redis_aof_dir/redis.pid"))"
		return
	fi
	check_ports_free redis-aof $REDIS_AOF_PORT
	rm -rf "$redis_aof_dir"
	mkdir -p "$redis_aof_dir"
	redis-server --bind 127.0.0.1 --port $REDIS_AOF_PORT --dir "$redis_aof_dir" \
		--save '' --appendonly yes --appendfsync always --protected-mode yes --daemonize no \
		--logfile "$redis_aof_dir/redis.log" >/dev/null 2>&1 &
	echo $! >"$redis_aof_dir/redis.pid"
	wait_until "redis-aof on :$REDIS_AOF_PORT" redis_aof_ready
}

redis_aof_ready() { [ "$(redis-cli -h 127.0.0.1 -p $REDIS_AOF_PORT ping 2>/dev/null)" = PONG ]; }
stop_redis-aof() { stop_pidfile "$redis_aof_dir/redis.pid" redis-aof; }
status_redis-aof() {
	if pid_alive "$redis_aof_dir/redis.pid" && redis_aof_ready; then
		echo "redis-aof: up (pid $(cat "$redis_aof_dir/redis.pid"), 127.0.0.1:$REDIS_AOF_PORT, appendfsync $(redis-cli -p $REDIS_AOF_PORT config get appendfsync | tail -1))"
	else
		echo "redis-aof: down"
		return 1
	fi
}

# ------------------------------------------------------------------- etcd --

# member_procs is a member's GOMAXPROCS: what paxlock's cluster script gives
# each of its three nodes (their share of the cores).
member_procs() { "$(cd "$(dirname "$0")/../.." && pwd)/scripts/cluster.sh" procs; }

etcd_dir="$PEERS_DIR/etcd"

etcd_endpoints() {
	local p out=()
	for p in "${ETCD_CLIENT_PORTS[@]}"; do out+=("http://127.0.0.1:$p"); done
	(IFS=,; echo "${out[*]}")
}

start_etcd() {
	install_etcd
	local i cluster="" n
	for i in 0 1 2; do
		if pid_alive "$etcd_dir/m$((i + 1)).pid"; then
			log "etcd member m$((i + 1)) already running; run '$0 restart etcd' for a fresh cluster"
			return 0
		fi
	done
	check_ports_free etcd "${ETCD_CLIENT_PORTS[@]}" "${ETCD_PEER_PORTS[@]}"
	rm -rf "$etcd_dir"
	mkdir -p "$etcd_dir"
	for i in 0 1 2; do
		cluster+="${cluster:+,}m$((i + 1))=http://127.0.0.1:${ETCD_PEER_PORTS[$i]}"
	done
	for i in 0 1 2; do
		n=m$((i + 1))
		# Each member gets its share of the cores, as paxlock's nodes do
		# (scripts/cluster.sh): three members share this machine.
		GOMAXPROCS="$(member_procs)" etcd --name "$n" --data-dir "$etcd_dir/$n.data" \
			--listen-client-urls "http://127.0.0.1:${ETCD_CLIENT_PORTS[$i]}" \
			--advertise-client-urls "http://127.0.0.1:${ETCD_CLIENT_PORTS[$i]}" \
			--listen-peer-urls "http://127.0.0.1:${ETCD_PEER_PORTS[$i]}" \
			--initial-advertise-peer-urls "http://127.0.0.1:${ETCD_PEER_PORTS[$i]}" \
			--initial-cluster "$cluster" --initial-cluster-state new \
			--initial-cluster-token paxlock-bench \
			--auto-compaction-mode periodic --auto-compaction-retention 5m \
			--logger zap --log-outputs stderr \
			>"$etcd_dir/$n.log" 2>&1 &
		echo $! >"$etcd_dir/$n.pid"
	done
	wait_until "etcd (3 members, leader elected)" etcd_ready
}

# etcd_ready: every member answers, and the health check (a quorum read) passes.
etcd_ready() {
	ETCDCTL_API=3 etcdctl --endpoints "$(etcd_endpoints)" --command-timeout 2s endpoint health
}

stop_etcd() {
	local i
	for i in 1 2 3; do stop_pidfile "$etcd_dir/m$i.pid" "etcd m$i"; done
}

status_etcd() {
	if etcd_ready >/dev/null 2>&1; then
		echo "etcd: up ($(etcd --version | head -1))"
		ETCDCTL_API=3 etcdctl --endpoints "$(etcd_endpoints)" endpoint status -w table
	else
		echo "etcd: down"
		return 1
	fi
}

# --------------------------------------------------------------- zookeeper --

zk_dir="$PEERS_DIR/zk"

start_zk() {
	install_zk
	local i n servers="" d
	for i in 1 2 3; do
		if pid_alive "$zk_dir/zk$i.pid"; then
			log "zookeeper member zk$i already running; run '$0 restart zk' for a fresh ensemble"
			return 0
		fi
	done
	check_ports_free zk "${ZK_CLIENT_PORTS[@]}" "${ZK_QUORUM_PORTS[@]}" "${ZK_ELECTION_PORTS[@]}"
	rm -rf "$zk_dir"
	for i in 0 1 2; do
		servers+="server.$((i + 1))=127.0.0.1:${ZK_QUORUM_PORTS[$i]}:${ZK_ELECTION_PORTS[$i]}"$'\n'
	done
	for i in 0 1 2; do
		n=zk$((i + 1))
		d="$zk_dir/$n"
		mkdir -p "$d/data" "$d/conf" "$d/log"
		echo $((i + 1)) >"$d/data/myid"
		# maxClientCnxns=0: the default (60 per client address) refuses the
		# harness's per-worker sessions, which all come from 127.0.0.1.
		# admin.enableServer=false: the AdminServer would bind :8080 in every member.
		cat >"$d/conf/zoo.cfg" <<EOF
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$d/data
clientPort=${ZK_CLIENT_PORTS[$i]}
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok,mntr,stat
autopurge.purgeInterval=1
$servers
EOF
		cat >"$d/conf/log4j.properties" <<EOF
log4j.rootLogger=INFO, FILE
log4j.appender.FILE=org.apache.log4j.RollingFileAppender
log4j.appender.FILE.File=$d/log/zookeeper.log
log4j.appender.FILE.MaxFileSize=10MB
log4j.appender.FILE.MaxBackupIndex=2
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1} - %m%n
EOF
		java -Xms128m -Xmx"$ZK_HEAP" -Dzookeeper.log.dir="$d/log" \
			-Dlog4j.configuration="file:$d/conf/log4j.properties" \
			-cp "$d/conf:/usr/share/java/zookeeper.jar$(zk_log_classpath)" \
			org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/conf/zoo.cfg" \
			>"$d/log/stdout.log" 2>&1 &
		echo $! >"$zk_dir/$n.pid"
	done
	wait_until "zookeeper (3 members, leader elected)" zk_ready
}

# zk_log_classpath: Debian's zookeeper.jar ships no SLF4J binding, so the
# server logs nothing unless one is on the classpath; use log4j 1.2's if present.
zk_log_classpath() {
	local j
	for j in /usr/share/java/slf4j-log4j12.jar /usr/share/java/log4j-1.2.jar; do
		[ -f "$j" ] || return 0
	done
	printf ':%s:%s' /usr/share/java/slf4j-log4j12.jar /usr/share/java/log4j-1.2.jar
}

# zk_ready: every member serves, and exactly one says it is the leader.
zk_ready() {
	local p leaders=0 reply
	for p in "${ZK_CLIENT_PORTS[@]}"; do
		reply=$(zk_4lw "$p" srvr) || return 1
		case "$reply" in
		*"Mode: leader"*) leaders=$((leaders + 1)) ;;
		*"Mode: follower"*) ;;
		*) return 1 ;;
		esac
	done
	[ $leaders -eq 1 ]
}

stop_zk() {
	local i
	for i in 1 2 3; do stop_pidfile "$zk_dir/zk$i.pid" "zookeeper zk$i"; done
}

status_zk() {
	local p
	if zk_ready; then
		echo "zk: up"
		for p in "${ZK_CLIENT_PORTS[@]}"; do
			echo "  :$p $(zk_4lw "$p" srvr | grep -E '^(Zookeeper version|Mode):' | tr '\n' ' ')"
		done
	else
		echo "zk: down"
		return 1
	fi
}

# ------------------------------------------------------------------- main --

usage() {
	sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

[ $# -ge 1 ] || usage
cmd=$1
shift
systems=("$@")
[ ${#systems[@]} -gt 0 ] || systems=(all)
expanded=()
for s in "${systems[@]}"; do
	case "$s" in
	all) expanded+=(redis redis-aof etcd zk) ;;
	redis | redis-aof | etcd | zk) expanded+=("$s") ;;
	zookeeper) expanded+=(zk) ;;
	*) die "unknown system '$s' (want redis, redis-aof, etcd, zk or all)" ;;
	esac
done

mkdir -p "$PEERS_DIR"
rc=0
# Every package is installed before any daemon starts: installing one
# stops the packages' default services, and Debian's init scripts stop a
# service by its executable, which took down the etcd members this script
# had just started when ZooKeeper was installed after them (make bench on a
# fresh machine failed with "etcd ... context deadline exceeded").
case "$cmd" in
start) for s in "${expanded[@]}"; do "install_$s"; done
	for s in "${expanded[@]}"; do "start_$s"; done ;;
stop) for s in "${expanded[@]}"; do "stop_$s"; done ;;
restart) for s in "${expanded[@]}"; do "install_$s"; done
	for s in "${expanded[@]}"; do "stop_$s"; "start_$s"; done ;;
status) for s in "${expanded[@]}"; do "status_$s" || rc=1; done ;;
install) for s in "${expanded[@]}"; do "install_$s"; done ;;
clean)
	for s in redis redis-aof etcd zk; do "stop_$s"; done
	rm -rf "$PEERS_DIR"
	log "removed $PEERS_DIR"
	;;
*) usage ;;
esac
exit $rc
