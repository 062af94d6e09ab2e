#!/usr/bin/env bash
# Starts, stops or inspects a local multi-cluster on loopback: a meta
# cluster (3 nodes, ports 7xxx) that holds the registry's tables, two lock
# clusters "east" (8xxx) and "west" (9xxx) of 3 nodes each, and two
# registry processes (clients 127.0.0.1:7501,7502; status 7601,7602) that
# serve the clusters' views from the meta cluster's tables and drive
# namespace moves. The namespace "app" (secret "app-secret") starts on
# east.
#   scripts/multicluster.sh start|stop|status
# Every cluster is secure as make run's (one development CA for all, a
# certificate per node naming its cluster, one admin token). Data, configs,
# logs and pids live under $RUNDIR (default .run/multi).
set -euo pipefail
umask 077 # configs name secrets; data directories hold every namespace's state
cd "$(dirname "$0")/.."
RUNDIR=${RUNDIR:-.run/multi}
BIN=${BIN:-bin}
CERTS=$RUNDIR/certs
LOCK_CLUSTERS=(east west)
declare -A BASE=([meta]=7000 [east]=8000 [west]=9000)
REGISTRIES="127.0.0.1:7501,127.0.0.1:7502"

admins() { local b=${BASE[$1]}; echo "127.0.0.1:$((b + 301)),127.0.0.1:$((b + 302)),127.0.0.1:$((b + 303))"; }
clients() { local b=${BASE[$1]}; echo "127.0.0.1:$((b + 101)),127.0.0.1:$((b + 102)),127.0.0.1:$((b + 103))"; }

# cluster runs scripts/cluster.sh for cluster $1 with the rest as its
# arguments.
cluster() {
  local name=$1
  shift
  local extra="" namespaces='[]'
  if [ "$name" = meta ]; then
    extra='"registry_namespace": "registry"'
    namespaces="[{\"name\": \"registry\", \"secret\": \"$(cat "$RUNDIR/registry.secret")\"}]"
  fi
  RUNDIR="$RUNDIR/$name" CERTS="$CERTS/$name" BIN="$BIN" PORT_BASE=${BASE[$name]} CLUSTER_NAME=$name \
    CLUSTER_EXTRA="$extra" CLUSTER_NAMESPACES="$namespaces" CLUSTER_QUIET=1 scripts/cluster.sh "$@"
}

# metactl runs paxlockctl against the meta cluster's admin endpoints.
metactl() {
  "$BIN/paxlockctl" -admin "$(admins meta)" -admin-ca "$CERTS/meta/ca.crt" -admin-token-file "$CERTS/meta/admin.token" "$@"
}

# certs makes the development CA (the meta cluster's) and gives each lock
# cluster the same CA, admin token and gossip key, with node certificates
# that name it.
certs() {
  [ -f "$CERTS/meta/ca.crt" ] && return 0
  "$BIN/paxlockctl" -out "$CERTS/meta" -cluster meta -nodes 3 -hosts 127.0.0.1,localhost certs >/dev/null
  local c i
  for c in "${LOCK_CLUSTERS[@]}"; do
    mkdir -p "$CERTS/$c"
    cp "$CERTS/meta"/{ca.crt,ca.key,admin.token,gossip.key} "$CERTS/$c/"
    for i in 1 2 3; do
      "$BIN/paxlockctl" -out "$CERTS/$c" -cluster "$c" -hosts 127.0.0.1,localhost certs node "$i" >/dev/null
    done
  done
  echo "generated a development CA, node certificates, admin token and gossip key in $CERTS/"
}

registry_config() {
  local i=$1
  cat <<JSON
{
  "listen": "127.0.0.1:750$i",
  "admin_listen": "127.0.0.1:760$i",
  "admin_token_file": "$CERTS/meta/admin.token",
  "meta": {
    "addrs": ["$(clients meta | sed 's/,/", "/g')"],
    "namespace": "registry",
    "secret_file": "$RUNDIR/registry.secret",
    "admin": ["$(admins meta | sed 's/,/", "/g')"],
    "admin_ca": "$CERTS/meta/ca.crt"
  }
}
JSON
}

running() { [ -f "$RUNDIR/r$1.pid" ] && kill -0 "$(cat "$RUNDIR/r$1.pid")" 2>/dev/null; }

start() {
  mkdir -p "$RUNDIR"
  chmod 700 "$RUNDIR" # also when an older run made it
  [ -f "$RUNDIR/registry.secret" ] || (umask 077 && head -c 24 /dev/urandom | base64 > "$RUNDIR/registry.secret")
  certs
  local c i fresh=0
  [ -d "$RUNDIR/meta/data" ] || fresh=1
  for c in meta "${LOCK_CLUSTERS[@]}"; do
    cluster "$c" start
    echo "cluster $c: nodes up (clients $(clients "$c"))"
  done
  if [ "$fresh" = 1 ]; then
    for c in "${LOCK_CLUSTERS[@]}"; do
      metactl cluster add "$c" "$(clients "$c")" "$(admins "$c")" "$CERTS/$c/ca.crt" >/dev/null
    done
    PAXLOCK_SECRET=app-secret metactl namespace -meta add app -cluster east >/dev/null
  fi
  for i in 1 2; do
    if running "$i"; then continue; fi
    registry_config "$i" > "$RUNDIR/r$i.json"
    chmod 600 "$RUNDIR/r$i.json"
    nohup "$BIN/paxlockd" -role registry -config "$RUNDIR/r$i.json" >> "$RUNDIR/r$i.log" 2>&1 &
    echo $! > "$RUNDIR/r$i.pid"
  done
  for i in 1 2; do
    for _ in $(seq 1 100); do
      curl -sf -H "Authorization: Bearer $(cat "$CERTS/meta/admin.token")" "http://127.0.0.1:760$i/status" >/dev/null 2>&1 && break
      sleep 0.1
    done
  done
  metactl cluster list
  metactl namespace -meta list
  cat <<TXT

paxlock is running as three clusters on 127.0.0.1, data under $RUNDIR/:
  meta cluster       $(clients meta)  (the registry's tables)
  lock cluster east  $(clients east)
  lock cluster west  $(clients west)
  registries         $REGISTRIES  (status: http://127.0.0.1:7601/status, with the token in $CERTS/meta/admin.token)
  namespace "app", secret "app-secret", on east

  lock through the registries:
    PAXLOCK_SECRET=app-secret $BIN/paxlockctl -registry $REGISTRIES -namespace app lock demo-key
  move the namespace to west, while locks are held (waits until it is done):
    $BIN/paxlockctl -admin $(admins meta) -admin-ca $CERTS/meta/ca.crt -admin-token-file $CERTS/meta/admin.token namespace move app -to west
  and: namespace move status app, namespace move abort app (before the flip)
  stop:   make stop CLUSTERS=2
TXT
}

stop() {
  local i c
  for i in 1 2; do
    if running "$i"; then kill -TERM "$(cat "$RUNDIR/r$i.pid")"; fi
  done
  for i in 1 2; do
    for _ in $(seq 1 50); do running "$i" || break; sleep 0.1; done
    if running "$i"; then kill -KILL "$(cat "$RUNDIR/r$i.pid")" || true; fi
    rm -f "$RUNDIR/r$i.pid"
  done
  for c in "${LOCK_CLUSTERS[@]}" meta; do
    [ -d "$RUNDIR/$c" ] && cluster "$c" stop >/dev/null
  done
  echo "stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status)
    metactl cluster list
    metactl namespace -meta list
    for i in 1 2; do curl -s -H "Authorization: Bearer $(cat "$CERTS/meta/admin.token")" "http://127.0.0.1:760$i/status" || echo "registry $i: not running"; echo; done
    ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
