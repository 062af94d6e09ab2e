#!/usr/bin/env bash
# ab.sh — a same-run A/B of two paxlock builds, the way a performance change
# is judged on a shared machine: rounds of lockbench, each round running
# build A and build B (in alternating order: A B, B A, A B, ...) against a
# fresh cluster, each followed by Redis, then abreport's table of every
# round and the medians.
#
# Usage: ab.sh A-REV [B-REV]
#
#   A-REV, B-REV  git revisions to build paxlockd and paxlockctl from; "."
#                 is the working tree, uncommitted changes included (B's
#                 default). The cluster script, lockbench and abreport come
#                 from the working tree, so both builds must take the same
#                 configuration.
#
# Environment:
#   ROUNDS           rounds (default 4)
#   AB_FLAGS         lockbench flags replacing the default run (uncontended
#                    and contended at 64 workers, 8 s after 2 s of warm-up)
#   CLUSTER_EXTRA_A, CLUSTER_EXTRA_B
#                    settings added to every node's config on that side (as
#                    scripts/cluster.sh's CLUSTER_EXTRA), to compare settings
#                    of one build: ab.sh . . with CLUSTER_EXTRA_B='"instance_window": 1'
#   ENV_A, ENV_B     NAME=value words set in that side's nodes' environment,
#                    for runtime settings: ENV_B='GOGC=400 GOMAXPROCS=1'
#   AB_PEER          the peer each round compares with (default redis;
#                    redis-aof is Redis fsyncing every write)
#   AB_CPU_BUDGET    equal machines: every server process (each node and
#                    the peer) held to this many cores with a cgroup CPU
#                    quota of its own (lockbench -cpu-budget), e.g. 0.5
#   AB_DIR           where builds, results and report go (default
#                    ${TMPDIR:-/tmp}/paxlock-ab; emptied first)
#
# It refuses to run while a `make run` cluster holds the ports, starts Redis
# with peers.sh, and on exit stops every server it started and removes the
# clusters' data. The report is $AB_DIR/report.md (also printed).
set -euo pipefail
# One module at a time, as its users get it: the repository's go.work is
# for commands typed at the root (see the Makefile).
export GOWORK=off

here=$(cd "$(dirname "$0")" && pwd)
bench=$(cd "$here/.." && pwd)
root=$(cd "$bench/.." && pwd)
AB_DIR="${AB_DIR:-${TMPDIR:-/tmp}/paxlock-ab}"
ROUNDS="${ROUNDS:-4}"
AB_FLAGS="${AB_FLAGS:--scenarios uncontended,contended -workers 64 -duration 8s -warmup 2s}"
AB_PEER="${AB_PEER:-redis}"
case "$AB_PEER" in redis | redis-aof | etcd | zk) ;; *) echo "ab: AB_PEER must be redis, redis-aof, etcd or zk, not '$AB_PEER'" >&2; exit 1 ;; esac
if [ -n "${AB_CPU_BUDGET:-}" ]; then AB_FLAGS="$AB_FLAGS -cpu-budget $AB_CPU_BUDGET"; fi

log() { printf 'ab: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ $# -ge 1 ] && [ $# -le 2 ] || die "usage: $0 A-REV [B-REV]"
rev_a=$1
rev_b=${2:-.}
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive number, not '$ROUNDS'"
for w in ${ENV_A:-} ${ENV_B:-}; do
	[[ "$w" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "ENV_A and ENV_B take NAME=value words, not '$w'"
done

# label names a revision in the report: its short hash, or the working tree.
label() {
	if [ "$1" = . ]; then
		echo "working tree ($(git -C "$root" describe --always --dirty 2>/dev/null || echo dev))"
	else
		git -C "$root" rev-parse --short "$1^{commit}"
	fi
}

# build REV DIR builds paxlockd and paxlockctl of REV into DIR.
build() {
	local rev=$1 dir=$2
	mkdir -p "$dir"
	if [ "$rev" = . ]; then
		(cd "$root" && go build -o "$dir/" ./cmd/paxlockd ./cmd/paxlockctl)
		return
	fi
	local src="$AB_DIR/src"
	rm -rf "$src"
	git -C "$root" worktree add --detach --force "$src" "$rev" >/dev/null 2>&1 || die "cannot check out $rev"
	(cd "$src" && go build -o "$dir/" ./cmd/paxlockd ./cmd/paxlockctl) || { git -C "$root" worktree remove --force "$src"; die "build of $rev failed"; }
	git -C "$root" worktree remove --force "$src"
}

label_a=$(label "$rev_a") || die "unknown revision $rev_a"
label_b=$(label "$rev_b") || die "unknown revision $rev_b"
rm -rf "$AB_DIR"
mkdir -p "$AB_DIR"
log "building A ($label_a) and B ($label_b) under $AB_DIR"
build "$rev_a" "$AB_DIR/bin-a"
build "$rev_b" "$AB_DIR/bin-b"
(cd "$bench" && go build -o "$AB_DIR/lockbench" ./cmd/lockbench && go build -o "$AB_DIR/abreport" ./cmd/abreport)

PEERS_DIR="${PEERS_DIR:-${TMPDIR:-/tmp}/paxlock-bench-peers}"
export PEERS_DIR
cleanup() {
	BIN="$AB_DIR/bin-a" "$here/paxlock.sh" stop >/dev/null 2>&1 || true
	"$here/peers.sh" clean >/dev/null 2>&1 || true
	rm -rf "$AB_DIR/bin-a" "$AB_DIR/bin-b"
}
trap cleanup EXIT INT TERM
"$here/peers.sh" start "$AB_PEER"

# one SIDE ROUND runs lockbench against a fresh cluster of that side's build.
one() {
	local s=$1 n=$2 extra envs
	if [ "$s" = a ]; then extra="${CLUSTER_EXTRA_A:-}" envs="${ENV_A:-}"; else extra="${CLUSTER_EXTRA_B:-}" envs="${ENV_B:-}"; fi
	# shellcheck disable=SC2086 # envs is a list of NAME=value words
	env $envs CLUSTER_EXTRA="$extra" BIN="$AB_DIR/bin-$s" "$here/paxlock.sh" start
	# shellcheck disable=SC2086 # AB_FLAGS is a list of flags
	"$AB_DIR/lockbench" -systems "paxlock,$AB_PEER" -idle 0 $AB_FLAGS -out "$AB_DIR/$n-$s" >"$AB_DIR/$n-$s.log" 2>&1 ||
		{ BIN="$AB_DIR/bin-$s" "$here/paxlock.sh" stop; die "lockbench failed in round $n ($s); see $AB_DIR/$n-$s.log"; }
	BIN="$AB_DIR/bin-$s" "$here/paxlock.sh" stop
	rm -rf "$PEERS_DIR/paxlock"
	log "round $n $s done"
}

for n in $(seq 1 "$ROUNDS"); do
	if [ $((n % 2)) -eq 1 ]; then
		one a "$n"
		one b "$n"
	else
		one b "$n"
		one a "$n"
	fi
done
"$AB_DIR/abreport" -a "$label_a" -b "$label_b" "$AB_DIR" | tee "$AB_DIR/report.md"
