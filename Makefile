# paxlock — build, test and run targets. See README.md.
GO      ?= go
# Every target works on one module at a time (the root, client/, bench/),
# each with its own go.mod and go.sum, exactly as its users get it. The
# repository's go.work, which joins the three for commands typed at the
# root (go vet ./client/..., editors), would merge their requirements
# into one graph: the targets turn it off.
export GOWORK := off
BIN     := bin
RUNDIR  ?= .run
TEST_PARALLEL ?= 6
PLAIN_NICE ?= $(shell command -v nice >/dev/null 2>&1 && echo nice -n 10)
TEST_P ?= $(shell n=$$(nproc 2>/dev/null || echo 4); [ $$n -lt 4 ] && n=4; echo $$n)
BENCH_CPU_BUDGET ?= 0.5
RACE_PKGS := ./server ./clienttests/recipe ./apiserver ./cmd/... ./paxos/host/... ./paxlocktest/... ./paxos/pebblestore/... ./paxos/tcpnet/... ./paxos/paxostest/... ./group/... ./server/... ./clienttests/... ./registry/... ./internal/gossip/... ./internal/clock/... ./e2e/... ./conformance/...
# The package lists, computed when a recipe needs them.
RACE_LIST = $(shell $(GO) list $(RACE_PKGS))
PLAIN_LIST = $(filter-out $(RACE_LIST),$(shell $(GO) list ./...))

.PHONY: api-gen restart size-check all build static docker-image docker-up docker-down docker-test test test-short vet fmt-check mod-check lint run stop bench bench-soak bench-ab pgo bench-failover failover-check e2e hostile backup-check chaos fuzz console-test

all: build

# BUILDVCS=auto stamps the binaries with the commit they were built from
# (paxlockd -version, paxlockctl version) when the tree is a git clone;
# Go omits it in a linked worktree. BUILDVCS=false never does.
BUILDVCS ?= auto
build:
	$(GO) build -buildvcs=$(BUILDVCS) -o $(BIN)/ ./cmd/...

# static builds paxlockd without cgo into bin/docker, what the Docker image
# packages (with an empty data directory for it).
static:
	mkdir -p bin/docker/data
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=$(BUILDVCS) -ldflags='-s -w' -o bin/docker/paxlockd ./cmd/paxlockd

# docker-image builds $(IMAGE):$(IMAGE_TAG) FROM scratch with the static
# paxlockd only (see Dockerfile: docker build . packages bin/docker/);
# nothing is pulled.
DOCKER    ?= docker
IMAGE     ?= paxlock/paxlockd
IMAGE_TAG ?= dev
docker-image: static
	$(DOCKER) build -t $(IMAGE):$(IMAGE_TAG) .

# api-gen regenerates the API's Go code (api/paxlock/v1) from its .proto
# files with buf and the protoc-gen-go and protoc-gen-connect-go plugins
# at pinned versions. The generated code is committed: neither users nor
# CI run it.
API_BUF     := github.com/bufbuild/buf/cmd/buf@v1.75.0
API_PLUGINS := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12 connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
api-gen:
	for p in $(API_PLUGINS); do GOFLAGS= $(GO) install $$p || exit 1; done
	cd api && PATH="$$($(GO) env GOPATH)/bin:$$PATH" GOFLAGS= $(GO) run $(API_BUF) generate

vet:
	$(GO) vet -pgo=off -tags console,invariants ./...
	cd client && $(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# mod-check fails when go.mod or go.sum of a module (the root, client/
# and bench/) is not what go mod tidy makes of it, when they name
# different Go versions, or when the client module's graph holds the root
# module (a user's go get of the client would then pull the node's
# dependencies).
mod-check:
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum not tidy: run go mod tidy"; exit 1; }
	@cd bench && $(GO) mod tidy -diff || { echo "bench/go.mod/go.sum not tidy: run go mod tidy in bench/"; exit 1; }
	@cd client && $(GO) mod tidy -diff || { echo "client/go.mod/go.sum not tidy: run go mod tidy in client/"; exit 1; }
	@a=$$($(GO) mod edit -print | sed -n 's/^go //p'); \
	for m in bench client; do b=$$(cd $$m && $(GO) mod edit -print | sed -n 's/^go //p'); \
	if [ "$$a" != "$$b" ]; then echo "go.mod says go $$a, $$m/go.mod go $$b: keep one Go version"; exit 1; fi; done
	@if (cd client && $(GO) list -m all) | grep -q '^github.com/paxlock/paxlock '; then \
	echo "client/go.mod requires the root module: the client module must need only what the client needs"; exit 1; fi

# lint runs golangci-lint (v2, configured in .golangci.yml) over the three
# modules; .ci/run installs the pinned version.
GOLANGCI_LINT ?= golangci-lint
lint: size-check
	$(GOLANGCI_LINT) run ./...
	cd client && $(GOLANGCI_LINT) run --config ../.golangci.yml ./...
	cd bench && $(GOLANGCI_LINT) run --config ../.golangci.yml ./...

# size-check fails on a Go file, tests aside, of more than 700 lines
# (generated code too: api/'s protos are split by job to stay under it):
# a file holds one job (functions are held to 100 lines by the linter's
# funlen).
size-check:
	@big=$$(git ls-files '*.go' ':!:*_test.go' | xargs wc -l | awk '$$2 != "total" && $$1 > 700 {print}'); \
	if [ -n "$$big" ]; then echo "files over 700 lines (split them by job):"; echo "$$big"; exit 1; fi

# test runs every test once, with the consensus core's invariants checked
# after every step (-tags invariants, internal/invariants): the packages
# that run goroutines or link the node (RACE_PKGS, the commands among
# them, and e2e and conformance, whose tests mostly skip here but whose
# binaries link the client and the lock service) under -race, the others (the single-threaded core and its
# 2,000-seed simulation among them) without, so that the dependency tree
# (Pebble, gnet, memberlist...) is compiled in one flavour only. The two
# lists run at once: the plain list's compile and the core's simulation
# fill the CPU the race list leaves idle while its nodes wait on leases
# and the network; the plain list runs at nice 10 (PLAIN_NICE), so that
# it takes what the race list leaves and does not slow the compile of the
# server package, the longest run, which the race list names first. The
# race list's output streams; the plain list's follows it in one piece;
# either failing fails make test. The client module (client/, its own
# go.mod) runs after the plain list in the same background job, under
# -race: its tests talk to fake nodes and finish in seconds; its tests
# against real nodes are the root's clienttests/. The race list's test binaries run
# TEST_P at once (at least 4: they mostly wait on leases and the network,
# so 2 at a time on 2 cores left the CPU idle) and the tests of one
# package TEST_PARALLEL at once (6; 8 made masters lapse under load); the
# cross-process suites are make e2e and make chaos.
# -pgo=off: a test binary gains nothing from paxlockd's profile
# (cmd/paxlockd/default.pgo), which would rebuild every dependency once
# more for that one package. -vet=off: go vet is make lint's
# (golangci-lint runs its full default set, a superset of go test's, and
# make vet alone); go test's own vet pass would type-check the whole
# dependency tree once more for its facts, about a tenth of the CPU of
# compiling that tree cold under -race (docs/testing.md).
TEST_FLAGS = -pgo=off -vet=off -tags invariants -count=1 -timeout 20m
test: fmt-check mod-check
	@plain=$$(mktemp); trap 'rm -f "$$plain"' EXIT; \
	echo "$(GO) test $(TEST_FLAGS) <plain list>, then the client module's under -race (in the background, their output after the race list's)"; \
	{ $(PLAIN_NICE) $(GO) test $(TEST_FLAGS) $(PLAIN_LIST); p=$$?; \
	  echo "--- the client module (client/, -race):"; \
	  (cd client && $(PLAIN_NICE) $(GO) test $(TEST_FLAGS) -race ./...); c=$$?; \
	  [ $$p -eq 0 ] && [ $$c -eq 0 ]; } >"$$plain" 2>&1 & pid=$$!; \
	echo "$(GO) test $(TEST_FLAGS) -race -p $(TEST_P) -parallel $(TEST_PARALLEL) <race list>"; \
	$(GO) test $(TEST_FLAGS) -race -p $(TEST_P) -parallel $(TEST_PARALLEL) $(RACE_LIST); race=$$?; \
	wait $$pid; plainrc=$$?; \
	echo "--- the plain list (without -race):"; cat "$$plain"; \
	if [ $$race -ne 0 ] || [ $$plainrc -ne 0 ]; then \
		echo "make test: FAIL (race list exit $$race, plain list and client module exit $$plainrc)"; exit 1; \
	fi; echo "make test: PASS"

# docker-up starts a 3-node cluster in containers on a private network
# (deploy/docker-compose.yml, scripts/compose.sh), secure like make run;
# docker-down removes it; docker-test brings it up, takes a lock through it
# from the host and tears it down (CI runs it).
docker-up:
	BIN=$(BIN) scripts/compose.sh up
docker-down:
	BIN=$(BIN) scripts/compose.sh down
docker-test:
	BIN=$(BIN) scripts/compose.sh test

# run builds and starts a local 3-node cluster and says how to use it.
# make run CLUSTERS=2 starts instead a meta cluster with two registries
# and two lock clusters, east and west (scripts/multicluster.sh), and
# says how to move a namespace between them.
run: build
ifeq ($(CLUSTERS),2)
	BIN=$(BIN) scripts/multicluster.sh start
else
	RUNDIR=$(RUNDIR) BIN=$(BIN) scripts/cluster.sh start
endif

# conformance runs the scenarios every client must pass (conformance/)
# with the Go client, the Python client and curl's JSON against a fresh
# secure cluster started as make run starts one (its files under
# CONFORMANCE_DIR, removed after), and stops it. make run's ports must be
# free. About a minute.
CONFORMANCE_DIR ?= $(or $(TMPDIR),/tmp)/paxlock-conformance
conformance: build
	@rm -rf $(CONFORMANCE_DIR); trap 'RUNDIR=$(CONFORMANCE_DIR) BIN=$(BIN) scripts/cluster.sh stop >/dev/null; rm -rf $(CONFORMANCE_DIR)' EXIT INT TERM; \
	RUNDIR=$(CONFORMANCE_DIR) BIN=$(BIN) scripts/cluster.sh start >/dev/null && \
	PAXLOCK_CONFORMANCE=1 PAXLOCK_REGISTRY=127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103 \
	PAXLOCK_API_URLS=https://127.0.0.1:7121,https://127.0.0.1:7122,https://127.0.0.1:7123 \
	PAXLOCK_NAMESPACE=default PAXLOCK_SECRET=paxlock PAXLOCK_CA=$(CONFORMANCE_DIR)/certs/ca.crt PAXLOCK_CONFORMANCE_DIR=$(CONFORMANCE_DIR) \
	$(GO) test -count=1 -v -timeout 10m ./conformance/

stop:
ifeq ($(CLUSTERS),2)
	BIN=$(BIN) scripts/multicluster.sh stop
else
	RUNDIR=$(RUNDIR) BIN=$(BIN) scripts/cluster.sh stop
endif

# restart is a rolling restart of make run's cluster: each node in turn
# hands its groups to the others, stops and starts again with the binary
# in $(BIN), the next once the masters are spread evenly again.
restart: build
	RUNDIR=$(RUNDIR) BIN=$(BIN) scripts/cluster.sh restart

# bench: the standard comparison (uncontended and contended at 64 workers,
# 3 repeats, plus a short throughput-vs-workers sweep) of paxlock against
# Redis, etcd and ZooKeeper on loopback. It builds bin/, starts its own
# 3-node paxlock cluster (bench/scripts/paxlock.sh: scripts/cluster.sh with
# its data under $PEERS_DIR/paxlock, never .run/; a cluster from make run
# must be stopped first, the ports are the same) and the peers, and stops
# them all afterwards, removing their data under $PEERS_DIR (default
# /tmp/paxlock-bench-peers; BENCH_KEEP=1 keeps it and the logs). Results go
# to bench/results/, with CPU per op of every system (servers from their pid
# files, the load generator from getrusage). Extra lockbench flags:
# make bench BENCH_FLAGS='-repeats 5'. Then the same systems again on equal
# machines (bench/results/equal/): every server process (each paxlock node,
# each peer server) held to BENCH_CPU_BUDGET cores (default 0.5) with a
# cgroup CPU quota of its own, the load generator outside, as if each ran
# on a machine of its own; skipped with a message where cgroups are not
# writable, and with BENCH_CPU_BUDGET=0. Flags of that run only:
# EQUAL_FLAGS. About 16-18 minutes on 2 cores (estimated: paxlock-api adds ~2.5).
bench: build
	cd bench && trap './scripts/paxlock.sh stop; if [ -n "$(BENCH_KEEP)" ]; then ./scripts/peers.sh stop all; else ./scripts/peers.sh clean; fi' EXIT INT TERM; \
	BIN=$(abspath $(BIN)) ./scripts/paxlock.sh start && \
	./scripts/peers.sh start all && \
	$(GO) run ./cmd/lockbench -scenarios uncontended,contended,sweep \
		-workers 64 -keys 16 -duration 8s -warmup 2s -repeats 3 \
		-sweep 1,4,8,16,64,256 -sweep-duration 3s -sweep-warmup 1s \
		-out results $(BENCH_FLAGS) && \
	if [ "$(BENCH_CPU_BUDGET)" != 0 ]; then \
	$(GO) run ./cmd/lockbench -systems paxlock,paxlock-api,redis,redis-aof,etcd,zk -scenarios uncontended,contended,sweep \
		-workers 64 -keys 16 -duration 8s -warmup 2s -repeats 2 \
		-sweep 1,4,64,256 -sweep-duration 3s -sweep-warmup 1s -idle 0 \
		-cpu-budget $(BENCH_CPU_BUDGET) -cpu-period 20ms -cpu-budget-optional \
		-out results/equal $(EQUAL_FLAGS); fi

# bench-soak loads a fresh 3-node cluster (bench/scripts/paxlock.sh)
# continuously at 64 workers for SOAK (default 30m) and records every
# minute its throughput, p99/p999, the nodes' CPU per op, RSS, data
# directory and storage-engine metrics, with Redis run for 15 s every 5
# minutes as the machine's reference; bench/results/soak/ gets soak.md,
# soak.json and two plots. Extra flags: SOAK_FLAGS='-scenario contended'.
bench-soak: build
	cd bench && trap './scripts/paxlock.sh stop; ./scripts/peers.sh clean' EXIT INT TERM; \
	BIN=$(abspath $(BIN)) ./scripts/paxlock.sh start && \
	./scripts/peers.sh start redis && \
	$(GO) run ./cmd/soak -duration $(or $(SOAK),30m) -out results/soak $(SOAK_FLAGS)

# pgo records the CPU profile paxlockd is built with (cmd/paxlockd/default.pgo,
# which go build picks up by itself: profile-guided optimization) from the
# benchmark's cluster under make bench's load (bench/scripts/pgo.sh). Refresh
# it when the request path changes much, and judge it with make bench-ab.
# About 1.5 minutes.
pgo: build
	bench/scripts/pgo.sh

# bench-ab judges a performance change: a same-run A/B of two builds
# (bench/scripts/ab.sh), ROUNDS rounds of paxlock against Redis with the
# two builds in alternating order, each on a fresh cluster, and a table of
# every round with the medians. A is a git revision; B defaults to the
# working tree. make bench-ab A=main [B=HEAD] [ROUNDS=4]. On equal machines
# (each node and the peer held to 0.5 core) against Redis fsyncing every
# write: make bench-ab A=main AB_CPU_BUDGET=0.5 AB_PEER=redis-aof. About 1.5
# minutes a round.
bench-ab:
	@test -n "$(A)" || { echo "usage: make bench-ab A=<git revision> [B=<revision>, default: the working tree] [ROUNDS=4]" >&2; exit 2; }
	ROUNDS=$(or $(ROUNDS),4) bench/scripts/ab.sh $(A) $(or $(B),.)

# bench-failover kills (-9) a node of a 3-process cluster 5 times under
# client load and reports how long its groups stay unavailable to clients
# (the failover target in docs/design.md). About 2 minutes.
bench-failover:
	PAXLOCK_E2E=1 $(GO) test -run '^$$' -bench BenchmarkFailover -benchtime 5x -timeout 10m ./e2e/

# failover-check is bench-failover with 2 kills (about 30 s), for CI: it
# fails if the masters do not spread 5/5/5 again or a lost group is not
# served again within 30 s.
failover-check:
	PAXLOCK_E2E=1 $(GO) test -run '^$$' -bench BenchmarkFailover -benchtime 2x -timeout 5m ./e2e/

# fuzz runs every decoder's fuzz target for a fixed number of inputs.
fuzz:
	scripts/fuzz.sh

# e2e runs paxlockd as three processes and injects kill -9 and SIGSTOP
# pauses under client load, and adds, removes and replaces nodes
# (TestMembership); the histories are checked with porcupine, and what
# the holders believed they held with the holder view
# (e2e/holderview_test.go, whose live test TestHolderViewLive breaks a
# holder's belief on purpose and wants the overlap reported).
# The adversarial tests (TestHostile*) run in make hostile, not here.
e2e:
	PAXLOCK_E2E=1 $(GO) test -count=1 -v -timeout 10m -skip '^TestHostile' ./e2e/

# hostile attacks three paxlockd processes as a hostile network would
# (e2e/hostile_*_test.go): a descriptor storm under a lowered NOFILE
# (prlimit), 1,000 half-sent 1 MiB frames with the node's memory
# measured, pipelined GetViews never read, a second SCRAM handshake for
# another namespace on one connection, CSRF-shaped requests to an admin
# endpoint without a token, and a peer that claims a node's id and sends
# what no honest node sends. About 4 minutes.
hostile:
	PAXLOCK_E2E=1 $(GO) test -count=1 -v -timeout 8m -run '^TestHostile' ./e2e/

# backup-check: paxlockctl backup against three paxlockd processes holding
# locks, three new ones started with paxlockd -restore, the locks checked.
backup-check:
	PAXLOCK_E2E=1 $(GO) test -count=1 -v -timeout 5m -run TestBackupRestoreProcesses ./e2e/

# console-test drives the web console (the admin address's /) in headless
# Chromium against three paxlockd processes with admin HTTPS and a token,
# and saves a screenshot to $(ARTIFACTS)/console.png. It skips when no
# chromium is installed (apt-get install -y chromium; .ci/run does).
ARTIFACTS ?= $(CURDIR)/.artifacts
console-test:
	PAXLOCK_CONSOLE=1 PAXLOCK_ARTIFACTS=$(ARTIFACTS) $(GO) test -tags console -count=1 -v -run '^TestConsoleBrowser$$' -timeout 5m ./e2e/

# chaos runs N randomized fault schedules (default 10, about 8 minutes on
# 2 cores): each a 3- or 5-node cluster with every node in its own network
# namespace, a mixed workload through the Go client, and random kill -9,
# SIGTERM restarts, SIGSTOP pauses and symmetric and one-way partitions;
# every history is checked (porcupine's exclusive, read-write and semaphore models,
# tokens, overlaps, permits in use, watches), and what the holders believed
# they held (e2e/holderview_test.go). SEED=s replays the one schedule of seed s,
# as printed by a failing run. Needs root (network namespaces, iptables).
# The release check is make chaos N=100.
N ?= 10
SEED ?=
chaos:
	PAXLOCK_CHAOS=1 PAXLOCK_CHAOS_N=$(N) PAXLOCK_CHAOS_SEED=$(SEED) $(GO) test -count=1 -v -run '^TestChaos$$' -timeout $$(( $(if $(SEED),1,$(N)) * 4 + 5 ))m ./e2e/
