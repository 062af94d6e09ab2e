# paxlock — build, test and run targets. See README.md.
GO      ?= go
BIN     := bin
RUNDIR  ?= .run
RACE_PKGS := ./paxos/... ./group/... ./server/... ./client/...

.PHONY: all build test test-short vet fmt-check run stop bench e2e fuzz

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# test runs every test once, then the concurrent packages again under -race.
test: fmt-check vet
	$(GO) test -count=1 -timeout 20m ./...
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list $(RACE_PKGS) 2>/dev/null)

# run builds and starts a local 3-node cluster and says how to use it.
run: build
	RUNDIR=$(RUNDIR) BIN=$(BIN) scripts/cluster.sh start

stop:
	RUNDIR=$(RUNDIR) BIN=$(BIN) scripts/cluster.sh stop

# bench: the standard comparison (uncontended and contended at 64 workers,
# 3 repeats, plus a short throughput-vs-workers sweep) against Redis, etcd
# and ZooKeeper on loopback, and paxlock once bench/peers/paxlock.go is
# filled in. Results go to bench/results/. Extra lockbench flags:
# make bench BENCH_FLAGS='-repeats 5'. The peers are stopped afterwards.
bench:
	cd bench && trap './scripts/peers.sh stop all' EXIT INT TERM; \
	./scripts/peers.sh start all && \
	$(GO) run ./cmd/lockbench -scenarios uncontended,contended,sweep \
		-workers 64 -keys 16 -duration 8s -warmup 2s -repeats 3 \
		-sweep 1,4,16,64,256 -sweep-duration 3s -sweep-warmup 1s \
		-out results $(BENCH_FLAGS)

# fuzz runs every decoder's fuzz target for a fixed number of inputs.
fuzz:
	scripts/fuzz.sh

e2e:
	@echo "make e2e: no cross-process suite yet"; exit 1
