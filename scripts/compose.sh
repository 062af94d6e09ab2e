#!/usr/bin/env bash
# compose.sh — a 3-node paxlock cluster in Docker containers, each with its
# own address on a private network (deploy/docker-compose.yml).
#
#   scripts/compose.sh up     build the image (make docker-image), write the
#                             configs and development TLS material under
#                             $COMPOSE_DIR (default bin/compose), start the
#                             containers, wait until every group has a master
#   scripts/compose.sh test   up, take a lock through the cluster from the
#                             host, print the status, then down
#   scripts/compose.sh down   stop and remove the containers, their network
#                             and data volumes
#
# The nodes run as in `make run`: mutual TLS between peers, encrypted
# gossip, HTTPS admin endpoints that want the token. The host reaches the
# containers' addresses directly (Docker's bridge), e.g.
#   bin/paxlockctl -registry 10.231.0.11:7101 lock demo 5s
# $PAXLOCK_NET (default 10.231.0) is the /24 the containers use; pick
# another if that one is taken on your machine.
#
# The TLS material is a development CA made for this cluster; its private
# keys are made readable by the containers' unprivileged user (uid 65532),
# which is fine for a local cluster and nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
COMPOSE_DIR=$(mkdir -p "${COMPOSE_DIR:-bin/compose}" && cd "${COMPOSE_DIR:-bin/compose}" && pwd)
export PAXLOCK_NET=${PAXLOCK_NET:-10.231.0}
export PAXLOCK_COMPOSE_DIR=$COMPOSE_DIR
COMPOSE=${COMPOSE:-docker-compose}
compose() { $COMPOSE -p paxlock -f deploy/docker-compose.yml "$@"; }
ip() { echo "$PAXLOCK_NET.1$1"; }
ADMINS="$(ip 1):7301,$(ip 2):7301,$(ip 3):7301"
CLIENTS="$(ip 1):7101,$(ip 2):7101,$(ip 3):7101"
ctl() {
  "$BIN/paxlockctl" -admin "$ADMINS" -registry "$CLIENTS" -admin-ca "$COMPOSE_DIR/certs/ca.crt" \
    -admin-token-file "$COMPOSE_DIR/certs/admin.token" "$@"
}

config() {
  local i=$1
  cat <<JSON
{
  "node_id": $i,
  "data_dir": "/var/lib/paxlock",
  "admin_addr": "$(ip "$i"):7301",
  "tls": {"ca": "/etc/paxlock/certs/ca.crt", "cert": "/etc/paxlock/certs/node$i.crt", "key": "/etc/paxlock/certs/node$i.key"},
  "admin_tls": {},
  "admin_token_file": "/etc/paxlock/certs/admin.token",
  "gossip_key_file": "/etc/paxlock/certs/gossip.key",
  "nodes": [
    {"id": 1, "peer": "$(ip 1):7201", "client": "$(ip 1):7101", "gossip": "$(ip 1):7401", "admin": "$(ip 1):7301"},
    {"id": 2, "peer": "$(ip 2):7201", "client": "$(ip 2):7101", "gossip": "$(ip 2):7401", "admin": "$(ip 2):7301"},
    {"id": 3, "peer": "$(ip 3):7201", "client": "$(ip 3):7101", "gossip": "$(ip 3):7401", "admin": "$(ip 3):7301"}
  ],
  "namespaces": [{"name": "default", "secret": "paxlock"}]
}
JSON
}

up() {
  make -s build docker-image BIN="$BIN" >/dev/null
  if [ ! -f "$COMPOSE_DIR/certs/ca.crt" ]; then
    "$BIN/paxlockctl" -out "$COMPOSE_DIR/certs" -nodes 3 -hosts "$(ip 1),$(ip 2),$(ip 3),localhost" certs >/dev/null
  fi
  chmod 0755 "$COMPOSE_DIR" "$COMPOSE_DIR/certs"
  chmod 0644 "$COMPOSE_DIR"/certs/*
  for i in 1 2 3; do config "$i" >"$COMPOSE_DIR/n$i.json"; chmod 0644 "$COMPOSE_DIR/n$i.json"; done
  compose up -d
  if ! ctl -timeout 90s wait; then
    compose logs --tail 30 >&2 || true
    echo "compose cluster did not come up" >&2
    return 1
  fi
  echo "paxlock cluster in Docker: clients $CLIENTS, admin https://$(ip 1):7301 (CA $COMPOSE_DIR/certs/ca.crt, token in $COMPOSE_DIR/certs/admin.token)"
  echo "try: $BIN/paxlockctl -registry $CLIENTS lock demo 5s"
}

down() { compose down -v --remove-orphans; }

case "${1:-}" in
  up) up ;;
  down) down ;;
  test)
    trap down EXIT
    up
    out=$(PAXLOCK_SECRET=paxlock ctl -timeout 60s lock compose-demo 1s)
    echo "$out"
    echo "$out" | grep -q "fencing token" && echo "$out" | grep -q "^released" || { echo "the lock was not taken and released" >&2; exit 1; }
    ctl status
    # The image's health check (paxlockd -health healthz) reports each
    # node healthy within its first interval once the node serves.
    for _ in $(seq 1 45); do
      states=$(for c in $(compose ps -q); do docker inspect --format '{{.State.Health.Status}}' "$c"; done | sort | uniq -c | tr -s ' ')
      [ "$states" = " 3 healthy" ] && break
      sleep 2
    done
    echo "health: $states"
    [ "$states" = " 3 healthy" ] || { echo "the nodes' health checks did not report healthy" >&2; exit 1; }
    ;;
  *) echo "usage: $0 up|down|test" >&2; exit 2 ;;
esac
