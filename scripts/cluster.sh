#!/usr/bin/env bash
# Starts, stops or inspects a local 3-node paxlock cluster on loopback.
#   scripts/cluster.sh start|stop|status
# Data, configs, logs and pids live under $RUNDIR (default .run).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNDIR=${RUNDIR:-.run}
BIN=${BIN:-bin}
N=3
ADMINS="127.0.0.1:7301,127.0.0.1:7302,127.0.0.1:7303"

# config prints node $1's configuration. CLUSTER_EXTRA adds settings to
# every node's file, e.g. CLUSTER_EXTRA='"instance_window": 2'.
config() {
  local i=$1
  cat <<JSON
{
  "node_id": $i,${CLUSTER_EXTRA:+
  $CLUSTER_EXTRA,}
  "data_dir": "$RUNDIR/data/n$i",
  "admin_addr": "127.0.0.1:730$i",
  "nodes": [
    {"id": 1, "peer": "127.0.0.1:7201", "client": "127.0.0.1:7101", "gossip": "127.0.0.1:7401", "admin": "127.0.0.1:7301"},
    {"id": 2, "peer": "127.0.0.1:7202", "client": "127.0.0.1:7102", "gossip": "127.0.0.1:7402", "admin": "127.0.0.1:7302"},
    {"id": 3, "peer": "127.0.0.1:7203", "client": "127.0.0.1:7103", "gossip": "127.0.0.1:7403", "admin": "127.0.0.1:7303"}
  ],
  "namespaces": [{"name": "default", "secret": "paxlock"}]
}
JSON
}

running() { [ -f "$RUNDIR/n$1.pid" ] && kill -0 "$(cat "$RUNDIR/n$1.pid")" 2>/dev/null; }

start() {
  mkdir -p "$RUNDIR/data"
  for i in $(seq 1 $N); do
    if running "$i"; then echo "node $i already running (pid $(cat "$RUNDIR/n$i.pid"))"; continue; fi
    config "$i" > "$RUNDIR/n$i.json"
    nohup "$BIN/paxlockd" -config "$RUNDIR/n$i.json" >> "$RUNDIR/n$i.log" 2>&1 &
    echo $! > "$RUNDIR/n$i.pid"
  done
  if ! "$BIN/paxlockctl" -admin "$ADMINS" wait; then
    echo "cluster did not come up; see $RUNDIR/n*.log" >&2
    tail -n 20 "$RUNDIR"/n*.log >&2 || true
    exit 1
  fi
  "$BIN/paxlockctl" -admin "$ADMINS" status
  cat <<TXT

paxlock is running: 3 nodes on 127.0.0.1, data under $RUNDIR/.
  clients connect to   127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103
  namespace "default", secret "paxlock"
  status:              $BIN/paxlockctl status
  try a lock:          $BIN/paxlockctl -registry 127.0.0.1:7101 lock demo-key
  stop:                make stop   (a later make run keeps the locks)
TXT
}

stop() {
  for i in $(seq 1 $N); do
    if running "$i"; then
      kill -TERM "$(cat "$RUNDIR/n$i.pid")"
    fi
  done
  for i in $(seq 1 $N); do
    for _ in $(seq 1 100); do running "$i" || break; sleep 0.1; done
    if running "$i"; then kill -KILL "$(cat "$RUNDIR/n$i.pid")" || true; fi
    rm -f "$RUNDIR/n$i.pid"
  done
  echo "stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) "$BIN/paxlockctl" -admin "$ADMINS" status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
