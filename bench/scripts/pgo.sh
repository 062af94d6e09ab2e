#!/usr/bin/env bash
# pgo.sh — record the CPU profile paxlockd is built with
# (cmd/paxlockd/default.pgo, which `go build` uses by default: profile-guided
# optimization). It starts the benchmark's 3-node cluster (paxlock.sh), loads
# it the way `make bench` does (uncontended, then contended, 64 workers),
# takes a CPU profile of every node over both, and merges the three into
# cmd/paxlockd/default.pgo. Refresh it when the request path changes much;
# a stale profile costs only the optimization, never correctness.
#
# Usage: pgo.sh [SECONDS]   (each scenario's duration, default 25)
#
# It needs bin/ built (make build) and the cluster's ports free; it stops the
# cluster and removes its data on exit.
set -euo pipefail
# One module at a time, as its users get it: the repository's go.work is
# for commands typed at the root (see the Makefile).
export GOWORK=off

here=$(cd "$(dirname "$0")" && pwd)
bench=$(cd "$here/.." && pwd)
root=$(cd "$bench/.." && pwd)
secs="${1:-25}"
PEERS_DIR="${PEERS_DIR:-${TMPDIR:-/tmp}/paxlock-bench-peers}"
RUNDIR="$PEERS_DIR/paxlock"
out="$root/cmd/paxlockd/default.pgo"
work=$(mktemp -d "${TMPDIR:-/tmp}/paxlock-pgo.XXXXXX")

cleanup() {
	"$here/paxlock.sh" stop >/dev/null 2>&1 || true
	rm -rf "$work" "$RUNDIR"
}
trap cleanup EXIT INT TERM

BIN="${BIN:-$root/bin}" PEERS_DIR="$PEERS_DIR" "$here/paxlock.sh" start
cd "$bench"
go build -o "$work/lockbench" ./cmd/lockbench
"$work/lockbench" -systems paxlock -scenarios uncontended,contended -workers 64 \
	-duration "${secs}s" -warmup 2s -repeats 1 -idle 0 -pause 0s \
	-data-dir "$PEERS_DIR" -out "$work/results" >"$work/lockbench.log" 2>&1 &
lb=$!
sleep 4 # the first scenario's warm-up, and its first measured seconds
profile_secs=$((2 * secs))
token=$(cat "$RUNDIR/certs/admin.token")
pids=()
for n in 1 2 3; do
	curl -sf --cacert "$RUNDIR/certs/ca.crt" -H "Authorization: Bearer $token" \
		"https://127.0.0.1:730$n/debug/pprof/profile?seconds=$profile_secs" -o "$work/n$n.pprof" &
	pids+=($!)
done
wait "${pids[@]}"
wait "$lb" || { cat "$work/lockbench.log" >&2; exit 1; }
go tool pprof -proto "$work/n1.pprof" "$work/n2.pprof" "$work/n3.pprof" >"$out"
printf 'pgo: wrote %s (%s bytes) from %ss of each scenario\n' "$out" "$(wc -c <"$out")" "$secs" >&2
