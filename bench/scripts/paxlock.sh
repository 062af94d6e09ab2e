#!/usr/bin/env bash
# paxlock.sh — start and stop the paxlock cluster the benchmark runs against:
# the repository's scripts/cluster.sh (3 nodes on loopback, clients on
# 127.0.0.1:7101-7103, namespace "default", secret "paxlock"), with its data,
# configs, logs and pids under $PEERS_DIR/paxlock instead of the repository's
# .run/, so a benchmark never touches the cluster of `make run`.
#
# Usage: paxlock.sh start|stop|status
#
#   start   refuses if something already listens on the cluster's ports (a
#           `make run` cluster: stop it with `make stop`), wipes
#           $PEERS_DIR/paxlock, starts the nodes from $BIN (default: the
#           repository's bin/, which must be built), waits until every group
#           has a master and the masters are spread evenly over the nodes.
#   stop    stops the nodes started here.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PEERS_DIR="${PEERS_DIR:-${TMPDIR:-/tmp}/paxlock-bench-peers}"
RUNDIR="${PAXLOCK_RUNDIR:-$PEERS_DIR/paxlock}"
BIN="${BIN:-$root/bin}"
BALANCE_SECS="${BALANCE_SECS:-30}"
PORTS=(7101 7102 7103 7201 7202 7203 7301 7302 7303 7401 7402 7403)
ADMINS="127.0.0.1:7301,127.0.0.1:7302,127.0.0.1:7303"

log() { printf 'paxlock: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

cluster() { RUNDIR="$RUNDIR" BIN="$BIN" "$root/scripts/cluster.sh" "$@"; }

# ctl runs paxlockctl against the cluster's admin endpoints, with the
# development CA and admin token cluster.sh generated (with
# CLUSTER_SECURE=0 it runs plaintext, with the token in $RUNDIR/admin.token).
ctl() {
	if [ -f "$RUNDIR/certs/ca.crt" ]; then
		"$BIN/paxlockctl" -admin "$ADMINS" -admin-ca "$RUNDIR/certs/ca.crt" -admin-token-file "$RUNDIR/certs/admin.token" "$@"
	else
		"$BIN/paxlockctl" -admin "$ADMINS" -admin-ca "" -admin-token-file "$RUNDIR/admin.token" "$@"
	fi
}

# balanced: every node up and masters spread within one of each other.
balanced() {
	ctl status 2>/dev/null | awk '
		$1 ~ /^[0-9]+$/ && NF >= 6 && $4 ~ /^(up|down)$/ {
			n++; if ($4 != "up") bad = 1
			if (min == "" || $5 < min) min = $5
			if (max == "" || $5 > max) max = $5
		}
		END { exit !(n >= 3 && !bad && max - min <= 1) }'
}

start() {
	[ -x "$BIN/paxlockd" ] && [ -x "$BIN/paxlockctl" ] || die "no $BIN/paxlockd or paxlockctl: run make build first"
	local p
	for p in "${PORTS[@]}"; do
		port_busy "$p" && die "port 127.0.0.1:$p is in use (a cluster from make run? stop it with make stop, or: $0 stop)"
	done
	rm -rf "$RUNDIR"
	mkdir -p "$RUNDIR"
	cluster start >"$RUNDIR/start.log" 2>&1 || { cat "$RUNDIR/start.log" >&2; die "cluster did not start; logs under $RUNDIR"; }
	local i
	for i in $(seq 1 $((BALANCE_SECS * 5))); do
		if balanced; then
			log "3 nodes up, masters balanced after ~$((i / 5))s; data under $RUNDIR ($(cd "$root" && git describe --always --dirty 2>/dev/null || echo dev))"
			return 0
		fi
		sleep 0.2
	done
	log "masters not balanced after ${BALANCE_SECS}s; running anyway:"
	ctl status | head -5 >&2
}

stop() {
	[ -d "$RUNDIR" ] || return 0
	cluster stop >/dev/null
	log "stopped (data under $RUNDIR)"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) ctl status ;;
*) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
