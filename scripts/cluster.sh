#!/usr/bin/env bash
# Starts, stops or inspects a local 3-node paxlock cluster on loopback.
#   scripts/cluster.sh start|stop|restart|status|procs
# (restart is a rolling restart: each node in turn gets SIGTERM, which
# hands its groups to the others first, and starts again; the next one
# stops once every node answers and the masters are spread evenly.)
# (procs prints the GOMAXPROCS each co-located node gets; bench/scripts/
# peers.sh gives etcd's members the same.)
# Data, configs, logs and pids live under $RUNDIR (default .run).
#
# Secure by default: on first start, paxlockctl certs writes a development
# CA, one certificate per node, an admin token and a gossip key under
# $CERTS (default $RUNDIR/certs), and the nodes run mutual TLS between
# peers, encrypted gossip, an HTTPS admin endpoint that wants the token,
# and a TLS client listener (127.0.0.1:7111-7113) next to the plain one
# (relays between nodes use it, with the node certificates).
# To bring your own, put ca.crt, node<i>.crt, node<i>.key (each naming
# paxlock://paxlock/node/<i>), admin.token and gossip.key in $CERTS before
# the first start. CLUSTER_SECURE=0 runs everything in plaintext instead,
# except that the nodes share a random relay secret ($RUNDIR/relay.secret,
# written on first start) with which a node relaying a client's request to
# a master proves that it is a node of the cluster, and the admin
# endpoints want a random token ($RUNDIR/admin.token, written on first
# start; paxlockctl run from the repository root finds it).
# Everything the script writes (configs naming secrets, keys, tokens, the
# nodes' data directories, logs) is private to the user (umask 077).
#
# PORT_BASE (default 7000) places the ports: clients PORT_BASE+101..103,
# TLS clients +111..113, the API (Connect, gRPC, JSON over HTTP; TLS when
# secure) +121..123, peers +201..203, admin +301..303, gossip
# +401..403. CLUSTER_NAME (default paxlock) is the nodes' cluster_name and
# the name their certificates carry; CLUSTER_NAMESPACES (JSON, default the
# namespace "default" with secret "paxlock") the namespaces seeded at first
# start. scripts/multicluster.sh runs several clusters with them.
# CLUSTER_API=0 leaves the API out (to run a build that predates it, as a
# make bench-ab against an older revision does).
set -euo pipefail
umask 077
cd "$(dirname "$0")/.."
RUNDIR=${RUNDIR:-.run}
BIN=${BIN:-bin}
CERTS=${CERTS:-$RUNDIR/certs}
CLUSTER_SECURE=${CLUSTER_SECURE:-1}
PORT_BASE=${PORT_BASE:-7000}
CLUSTER_NAME=${CLUSTER_NAME:-paxlock}
CLUSTER_NAMESPACES=${CLUSTER_NAMESPACES:-'[{"name": "default", "secret": "paxlock"}]'}
N=3
port() { echo $((PORT_BASE + $1)); }
ADMINS="127.0.0.1:$(port 301),127.0.0.1:$(port 302),127.0.0.1:$(port 303)"
CLIENTS="127.0.0.1:$(port 101),127.0.0.1:$(port 102),127.0.0.1:$(port 103)"
TLS_CLIENTS="127.0.0.1:$(port 111),127.0.0.1:$(port 112),127.0.0.1:$(port 113)"
APIS="127.0.0.1:$(port 121),127.0.0.1:$(port 122),127.0.0.1:$(port 123)"

# ctl runs paxlockctl against the cluster's admin endpoints.
ctl() {
  if [ "$CLUSTER_SECURE" = 1 ]; then
    "$BIN/paxlockctl" -admin "$ADMINS" -admin-ca "$CERTS/ca.crt" -admin-token-file "$CERTS/admin.token" "$@"
  else
    "$BIN/paxlockctl" -admin "$ADMINS" -admin-ca "" -admin-token-file "$RUNDIR/admin.token" "$@"
  fi
}

# security prints node $1's security settings (when plaintext, only the
# relay secret).
security() {
  if [ "$CLUSTER_SECURE" != 1 ]; then
    printf '  "relay_secret_file": "%s",\n  "admin_token_file": "%s",\n' "$RUNDIR/relay.secret" "$RUNDIR/admin.token"
    return 0
  fi
  local i=$1
  cat <<JSON
  "tls": {"ca": "$CERTS/ca.crt", "cert": "$CERTS/node$i.crt", "key": "$CERTS/node$i.key"},
  "admin_tls": {},
  "admin_token_file": "$CERTS/admin.token",
  "gossip_key_file": "$CERTS/gossip.key",
JSON
}

# clienttls prints node $1's TLS client listener entry (nothing when
# plaintext).
clienttls() {
  [ "$CLUSTER_SECURE" = 1 ] || return 0
  printf ', "client_tls_addr": "127.0.0.1:%s"' "$(port $((110 + $1)))"
}

# config prints node $1's configuration. CLUSTER_EXTRA adds settings to
# every node's file, e.g. CLUSTER_EXTRA='"instance_window": 2'.
config() {
  local i=$1 j nodes=""
  for j in $(seq 1 $N); do
    nodes+="${nodes:+,
}    {\"id\": $j, \"peer\": \"127.0.0.1:$(port $((200 + j)))\", \"client\": \"127.0.0.1:$(port $((100 + j)))\"$(clienttls "$j"), \"gossip\": \"127.0.0.1:$(port $((400 + j)))\", \"admin\": \"127.0.0.1:$(port $((300 + j)))\"}"
  done
  cat <<JSON
{
  "node_id": $i,${CLUSTER_EXTRA:+
  $CLUSTER_EXTRA,}
$(security "$i")
  "cluster_name": "$CLUSTER_NAME",
  "data_dir": "$RUNDIR/data/n$i",
  "admin_addr": "127.0.0.1:$(port $((300 + i)))",
$(if [ "${CLUSTER_API:-1}" != 0 ]; then echo "  \"api_addr\": \"127.0.0.1:$(port $((120 + i)))\","; fi)
  "nodes": [
$nodes
  ],
  "namespaces": $CLUSTER_NAMESPACES
}
JSON
}

# curl_line prints a curl command that takes a lock through node 1's API
# as namespace "default".
curl_line() {
  local scheme=http tls=""
  if [ "$CLUSTER_SECURE" = 1 ]; then scheme=https tls="--cacert $CERTS/ca.crt "; fi
  printf "curl %s-u default:paxlock -H 'Content-Type: application/json' -d '{\"key\": \"demo-key\", \"owner\": \"me\", \"ttl_ms\": 30000}' %s://%s/paxlock.v1.LockService/Acquire" \
    "$tls" "$scheme" "${APIS%%,*}"
}

running() { [ -f "$RUNDIR/n$1.pid" ] && kill -0 "$(cat "$RUNDIR/n$1.pid")" 2>/dev/null; }

# node_procs is each node's GOMAXPROCS: the nodes share this machine, so
# each gets its share of the cores (at least one), as it would on a machine
# or in a container of that size; with the default (every node sized for
# the whole machine) three nodes on 2 cores spent 16% more CPU per op and
# were 14% slower when CPU-bound (docs/performance.md, "Each co-located
# node gets its share of the cores"). GOMAXPROCS in the environment wins.
node_procs() {
  if [ -n "${GOMAXPROCS:-}" ]; then echo "$GOMAXPROCS"; return; fi
  local n
  n=$(nproc 2>/dev/null || echo "$N")
  n=$((n / N))
  echo $((n > 0 ? n : 1))
}

start() {
  mkdir -p "$RUNDIR/data"
  chmod 700 "$RUNDIR" "$RUNDIR/data" # also when an older run made them
  if [ "$CLUSTER_SECURE" = 1 ] && [ ! -f "$CERTS/ca.crt" ]; then
    "$BIN/paxlockctl" -out "$CERTS" -cluster "$CLUSTER_NAME" -nodes $N -hosts 127.0.0.1,localhost certs >/dev/null
    echo "generated a development CA, node certificates, admin token and gossip key in $CERTS/"
  fi
  if [ "$CLUSTER_SECURE" != 1 ] && [ ! -f "$RUNDIR/relay.secret" ]; then
    (umask 077 && head -c 32 /dev/urandom | base64 > "$RUNDIR/relay.secret")
  fi
  if [ "$CLUSTER_SECURE" != 1 ] && [ ! -f "$RUNDIR/admin.token" ]; then
    (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$RUNDIR/admin.token")
  fi
  for i in $(seq 1 $N); do
    if running "$i"; then echo "node $i already running (pid $(cat "$RUNDIR/n$i.pid"))"; continue; fi
    config "$i" > "$RUNDIR/n$i.json"
    chmod 600 "$RUNDIR/n$i.json"
    GOMAXPROCS=$(node_procs) nohup "$BIN/paxlockd" -config "$RUNDIR/n$i.json" >> "$RUNDIR/n$i.log" 2>&1 &
    echo $! > "$RUNDIR/n$i.pid"
  done
  if ! ctl wait; then
    echo "cluster did not come up; see $RUNDIR/n*.log" >&2
    tail -n 20 "$RUNDIR"/n*.log >&2 || true
    exit 1
  fi
  [ -n "${CLUSTER_QUIET:-}" ] && return 0
  ctl status
  local scheme=http
  if [ "$CLUSTER_SECURE" = 1 ]; then scheme=https; fi
  cat <<TXT

paxlock is running: 3 nodes on 127.0.0.1, data under $RUNDIR/.
  clients connect to   $CLIENTS
  namespace "default", secret "paxlock"
  status:              $BIN/paxlockctl status
  web console:         $scheme://${ADMINS%%,*}/   (any node's admin address)
  try a lock:          $BIN/paxlockctl -registry ${CLIENTS%%,*} lock demo-key
  API (any language):  $APIS (Connect, gRPC, gRPC-Web, JSON; docs/api.md)
  lock with curl:      $(curl_line)
  stop:                make stop   (a later make run keeps the locks)
TXT
  if [ "$CLUSTER_SECURE" = 1 ]; then
    local flags=""
    [ "$CERTS" = .run/certs ] || flags=" -admin-ca $CERTS/ca.crt -admin-token-file $CERTS/admin.token"
    cat <<TXT
  security:            peers mutual TLS, gossip encrypted, admin HTTPS with a token;
                       clients authenticate with SCRAM-SHA-256 (the secret never travels);
                       development keys in $CERTS/ (CLUSTER_SECURE=0: all plaintext)
  clients over TLS:    $TLS_CLIENTS (CA $CERTS/ca.crt)
                       $BIN/paxlockctl -registry ${TLS_CLIENTS%%,*} -ca $CERTS/ca.crt lock demo-key
                       Go: client.Config{Registry: those, TLS: &tls.Config{RootCAs: <the CA>}}
  admin commands:      $BIN/paxlockctl$flags status
                       (elsewhere: -admin-ca FILE, token in PAXLOCK_ADMIN_TOKEN or -admin-token-file FILE)
  console token:       $CERTS/admin.token (the page asks for it once; the
                       browser warns about the development CA: accept it or
                       import $CERTS/ca.crt)
  own certificates:    docs/security.md, "Certificates"
TXT
  else
    cat <<TXT
  admin token:         $RUNDIR/admin.token (the console asks for it once; paxlockctl
                       run from the repository root finds it, elsewhere
                       -admin-token-file FILE or PAXLOCK_ADMIN_TOKEN)
TXT
  fi
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

# restart restarts the running nodes one at a time (see the top).
restart() {
  for i in $(seq 1 $N); do
    running "$i" || { echo "node $i is not running: make run starts the cluster" >&2; exit 1; }
  done
  for i in $(seq 1 $N); do
    kill -TERM "$(cat "$RUNDIR/n$i.pid")"
    for _ in $(seq 1 300); do running "$i" || break; sleep 0.1; done
    if running "$i"; then kill -KILL "$(cat "$RUNDIR/n$i.pid")" || true; fi
    GOMAXPROCS=$(node_procs) nohup "$BIN/paxlockd" -config "$RUNDIR/n$i.json" >> "$RUNDIR/n$i.log" 2>&1 &
    echo $! > "$RUNDIR/n$i.pid"
    if ! ctl -timeout 2m wait -balanced >/dev/null; then
      echo "node $i did not come back; see $RUNDIR/n$i.log" >&2
      exit 1
    fi
    echo "node $i restarted"
  done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) restart ;;
  status) ctl status ;;
  procs) node_procs ;;
  *) echo "usage: $0 start|stop|restart|status|procs" >&2; exit 2 ;;
esac
