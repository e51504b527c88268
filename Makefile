# cycles-go. `make help` lists the targets.
SHELL := /bin/bash
GO    ?= go
GOBIN := $(shell $(GO) env GOPATH)/bin
export PATH := $(PATH):$(GOBIN)

# Pinned code generators (local plugins only; no remote registry).
BUF_VERSION                ?= v1.47.2
PROTOC_GEN_GO_VERSION      ?= v1.36.5
PROTOC_GEN_GO_GRPC_VERSION ?= v1.5.1
GRPCURL_VERSION            ?= v1.9.2
GOLANGCI_LINT_VERSION      ?= v2.15.0

# Test budget: the whole suite must stay well inside CI's limit on 2 cores.
TEST_TIMEOUT ?= 20m
TEST_FLAGS   ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help (times: 2-core machine, warm module and build caches unless noted)
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: deps
deps: ## Install redis-server and PostgreSQL (the archive tests start their own) with apt when missing
	@$(call apt_install,redis-server,redis-server,redis-server (>= 7))
	@redis-server --version
	@if [ -z "$$PG_BIN" ] && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then \
	  echo "PostgreSQL not found; installing it with apt"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo"; \
	  if command -v apt-get >/dev/null 2>&1; then \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql >/dev/null; \
	  else echo "please install PostgreSQL (>= 14; set PG_BIN to its bin directory) and retry"; exit 1; fi; \
	fi
	@ls -d $${PG_BIN:-/usr/lib/postgresql/*/bin} 2>/dev/null | tail -1 || command -v initdb

.PHONY: deps-node
deps-node: ## Install node and npm with apt when they are missing (the TypeScript client test needs them)
	@$(call apt_install,npm,nodejs npm,node and npm)
	@echo "node $$(node --version), npm $$(npm --version)"

# apt_install(command, packages, what): install packages with apt when
# command is missing (sudo when not root); elsewhere, ask for what.
define apt_install
if ! command -v $(1) >/dev/null 2>&1; then \
  echo "$(1) not found; installing $(2) with apt"; \
  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo"; \
  if command -v apt-get >/dev/null 2>&1; then \
    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(2) >/dev/null; \
  else echo "please install $(3) and retry"; exit 1; fi; \
fi
endef

.PHONY: tools
tools: ## Install buf, protoc-gen-go, protoc-gen-go-grpc, grpcurl and golangci-lint (pinned) with go install (first time: minutes, compiling them)
	$(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	$(GO) install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)
	$(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

# golangci-lint from the Go module proxy (no binary download), at the pinned
# version: installed when missing or when another version is on the PATH.
.PHONY: golangci-lint
golangci-lint:
	@v=$$(golangci-lint version --short 2>/dev/null || true); \
	if [ "v$$v" != "$(GOLANGCI_LINT_VERSION)" ]; then \
	  echo "installing golangci-lint $(GOLANGCI_LINT_VERSION) with go install (first time: a few minutes)"; \
	  $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION); fi

.PHONY: generate
generate: ## Regenerate gen/ from proto/ with local plugins
	@command -v buf >/dev/null || $(MAKE) tools
	buf lint
	rm -rf gen/cycles
	buf generate
	$(MAKE) --no-print-directory descriptors

.PHONY: descriptors
descriptors: ## Write internal/contract/cycles.binpb: the descriptor set with source info and imports (served by reflection)
	@command -v buf >/dev/null || $(MAKE) tools
	buf build --as-file-descriptor-set -o internal/contract/cycles.binpb

.PHONY: lint
lint: golangci-lint ## buf lint, gofmt, go vet and golangci-lint (.golangci.yml; pinned GOLANGCI_LINT_VERSION)
	@command -v buf >/dev/null || $(MAKE) tools
	buf lint
	@bad=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); test -z "$$bad" || { echo "gofmt -w these files:"; echo "$$bad"; exit 1; }
	$(GO) vet ./...
	golangci-lint run ./...

.PHONY: check-fresh
check-fresh: ## Fail when gen/, the descriptor set or go.mod/go.sum differ from what proto/ and the imports produce (regenerates, then git diff)
	$(MAKE) --no-print-directory generate
	$(GO) mod tidy
	@stale=$$(git status --porcelain -- gen internal/contract go.mod go.sum); test -z "$$stale" \
	  || { echo "$$stale"; git diff --stat -- gen internal/contract go.mod go.sum; \
	       echo "generated files or go.mod are stale: run make generate and go mod tidy, then commit"; exit 1; }

.PHONY: breaking
breaking: ## buf breaking against main
	buf breaking --against '.git#branch=main'

.PHONY: build
build: ## Build bin/cyclesd and the tools (first time: ~5-7 min downloading and compiling; then seconds)
	$(GO) build -o bin/ ./cmd/...

# Release builds: static (CGO_ENABLED=0), stripped of local paths, stamped
# with the version, commit and date that `cyclesd version` prints.
VERSION         ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT          ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BUILD_DATE      ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
RELEASE_TARGETS ?= linux/amd64 linux/arm64 darwin/arm64

.PHONY: release
release: ## Build stamped static cyclesd binaries for linux/amd64, linux/arm64, darwin/arm64 into dist/ (with SHA256SUMS)
	@rm -rf dist && mkdir -p dist
	@set -e; for t in $(RELEASE_TARGETS); do os=$${t%/*}; arch=$${t#*/}; \
	  out=dist/cyclesd-$(VERSION)-$$os-$$arch; echo "building $$out"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath \
	    -ldflags "-s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(BUILD_DATE)" \
	    -o $$out ./cmd/cyclesd; done
	@cd dist && sha256sum cyclesd-* > SHA256SUMS && cat SHA256SUMS

.PHONY: run
run: ## Build, then start cyclesd in dev mode (embedded store, demo tenant; prints grpcurl commands). First time ~5-7 min
	@echo "make run: downloading Go modules (first time only)..."
	@$(GO) mod download
	@echo "make run: compiling bin/cyclesd (first time: several minutes on a small machine; later seconds)..."
	@$(GO) build -o bin/cyclesd ./cmd/cyclesd
	@echo "make run: starting bin/cyclesd in dev mode $(ARGS) (Ctrl-C stops it)"
	@exec bin/cyclesd $(ARGS)

.PHONY: check-readme
check-readme: deps grpcurl ## Paste README.md's sh blocks in order against a fresh cyclesd (dev mode, then real Redis); check its links (~30 s)
	CYCLES_REQUIRE_GRPCURL=1 $(GO) test -count=1 -v ./test/readme

.PHONY: grpcurl
grpcurl: ## Install grpcurl (pinned) with go install, if it is not on the PATH
	@command -v grpcurl >/dev/null || { echo "installing grpcurl $(GRPCURL_VERSION) with go install"; $(GO) install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION); }

# Suites that also run against a local 3-master Redis Cluster.
CLUSTER_SUITES ?= ./internal/ledger/... ./internal/policy/... ./internal/sweeper/... ./internal/events/... ./internal/ratelimit/... ./internal/admin/... ./internal/api/... ./test/ledgertest/... ./test/redistest/... ./test/property/...

.PHONY: test
test: deps deps-node grpcurl ## Run every test (own redis-server processes), Cluster suites, fuzz, 60 s soak, clients; fails if it leaves anything in TMPDIR: ~13 min
	@tmp=$$(mktemp -d "$${TMPDIR:-/tmp}/cycles-make-test-XXXXXX"); chmod a+x "$$tmp"; \
	TMPDIR=$$tmp $(MAKE) --no-print-directory test-all; code=$$?; \
	left=$$(ls -A "$$tmp"); rm -rf "$$tmp"; \
	if [ -n "$$left" ]; then echo "make test left these in TMPDIR (use t.TempDir, redistest.Main, or remove them):"; echo "$$left"; exit 1; fi; \
	exit $$code

.PHONY: test-all
test-all: deps grpcurl
	$(GO) vet ./...
	CYCLES_REQUIRE_GRPCURL=1 $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) ./...
	$(MAKE) --no-print-directory test-cluster
	$(MAKE) --no-print-directory fuzz FUZZ_TIME=$(FUZZ_SHORT_TIME)
	$(MAKE) --no-print-directory soak SOAK_DURATION=$(SOAK_SHORT_DURATION)
	$(MAKE) --no-print-directory test-clients

.PHONY: test-clients
test-clients: deps-node ## Generate Python and TypeScript stubs, start a dev cyclesd, run examples/python and examples/typescript
	examples/test-clients.sh

.PHONY: test-cluster
test-cluster: deps ## Run the ledger, sweeper, event, limiter and admin suites against a real 3-master Cluster (several minutes)
	CYCLES_TEST_REDIS=cluster $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) $(CLUSTER_SUITES)

# Property tests, soak and fuzzing (test/property, test/soak, *_fuzz_test.go;
# test/crash runs inside `go test ./...`). make test runs the short versions:
# the property suite's default 100 cases, every fuzz target for
# FUZZ_SHORT_TIME and a SOAK_SHORT_DURATION soak. Fuzz targets are found, not
# listed: every Fuzz* function `go test -list` reports in the packages whose
# test files declare one. The short run is a count of executions, not a
# duration: Go 1.26's fuzz coordinator can report "context deadline exceeded"
# as a failure when a duration -fuzztime ends while a worker is mid-call on a
# loaded machine (go.dev/issue/75804, fixed in Go 1.27), with no failing input
# found. A count has no deadline to race. FUZZ_TIME may be either form.
PROPERTY_CHECKS     ?= 1000
SOAK_DURATION       ?= 30m
SOAK_SHORT_DURATION ?= 60s
FUZZ_TIME           ?= 1m
FUZZ_SHORT_TIME     ?= 3000x

.PHONY: test-long
test-long: deps ## Property tests with PROPERTY_CHECKS (default 1,000) random cases (tens of minutes)
	$(GO) test -count=1 -timeout 60m -run TestLedgerProperties -v ./test/property -rapid.checks=$(PROPERTY_CHECKS)

.PHONY: soak
soak: deps ## Soak a real cyclesd for SOAK_DURATION (default 30m) at >= 100 ops/s; checks S1-S4, prints the figures
	$(GO) test -count=1 -timeout 0 -run '^TestSoak$$' -v ./test/soak -soak -soak.duration=$(SOAK_DURATION)

.PHONY: fuzz
fuzz: ## Fuzz every Fuzz* target of the module for FUZZ_TIME each (default 1m: about a minute per target)
	@set -e; pkgs=$$(git grep -l '^func Fuzz' -- '*_test.go' | xargs -n1 dirname | sort -u | sed 's|^|./|'); \
	n=0; for pkg in $$pkgs; do \
	  for name in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do n=$$((n+1)); \
	    echo "fuzz $$name in $$pkg for $(FUZZ_TIME)"; \
	    $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZ_TIME) $$pkg; done; done; \
	test $$n -gt 0 || { echo "no fuzz targets found"; exit 1; }

.PHONY: test-race
test-race: deps ## Run every test with the race detector (slower than make test: tens of minutes)
	$(GO) test -race -count=1 -timeout 30m ./...

# Load benchmark of cyclesd (cmd/cycles-bench, see BENCHMARKS.md). BENCH_FLAGS
# passes flags to it, e.g. BENCH_FLAGS='-clients 50 -profile reserve/shared/50'.
BENCH_FLAGS ?=
BENCH_OUT   ?= bench/results

.PHONY: bench
bench: deps ## Load-test cyclesd over gRPC (1-200 clients, ceiling, backlog; ~3 min); writes bench/results/latest.json
	$(GO) build -o bin/ ./cmd/cyclesd ./cmd/cycles-bench
	bin/cycles-bench -cyclesd bin/cyclesd -out $(BENCH_OUT)/latest.json $(BENCH_FLAGS)

.PHONY: bench-check
bench-check: deps ## Three bench runs (~9 min); fail if a headline median is >25% worse than bench/baseline.json (and say how the baseline was taken differently)
	$(GO) build -o bin/ ./cmd/cyclesd ./cmd/cycles-bench
	@mkdir -p $(BENCH_OUT)
	for i in 1 2 3; do bin/cycles-bench -q -cyclesd bin/cyclesd -out $(BENCH_OUT)/check-$$i.json $(BENCH_FLAGS) > $(BENCH_OUT)/check-$$i.txt || { cat $(BENCH_OUT)/check-$$i.txt; exit 1; }; done
	bin/cycles-bench check -baseline bench/baseline.json -median-out $(BENCH_OUT)/check-median.json $(BENCH_OUT)/check-1.json $(BENCH_OUT)/check-2.json $(BENCH_OUT)/check-3.json

.PHONY: bench-cost
bench-cost: deps ## Instructions Redis executes per reserve/commit/release script call (redis-server under callgrind; ~20 s; needs valgrind)
	@command -v valgrind >/dev/null || { echo "bench-cost needs valgrind: sudo apt-get install -y valgrind"; exit 1; }
	$(GO) build -o bin/ ./cmd/cycles-bench
	bin/cycles-bench scriptcost $(BENCH_FLAGS)

.PHONY: bench-cost-wall
bench-cost-wall: deps ## Issue 21's cost on the wall clock without drift: reserve vs reserve-gov5 (and an identical twin as control), then the cold pair, called in turn in blocks of 5, 5,000 rounds each; Redis µs per call from SLOWLOG, ratios per round with 95 % intervals (~3 min)
	$(GO) build -o bin/ ./cmd/cycles-bench
	bin/cycles-bench scriptcost -interleave -n 5000 -ops reserve,reserve-gov5,reserve-twin $(BENCH_FLAGS)
	bin/cycles-bench scriptcost -interleave -n 5000 -ops reserve-spread,reserve-gov5-spread $(BENCH_FLAGS)

.PHONY: bench-archive
bench-archive: deps ## The PostgreSQL archive under load, settles over gRPC (catch-up rate, lag p99 at an offered 3,000 settles/s, Redis used_memory plateau with a 60 s hot window; ~5 min); prints the figures
	$(GO) build -o bin/ ./cmd/cyclesd ./cmd/cycles-bench
	bin/cycles-bench archive -cyclesd bin/cyclesd -out $(BENCH_OUT)/archive.json $(BENCH_FLAGS)

.PHONY: bench-archive-lag
bench-archive-lag: deps ## Issue 22's lag at 3,000 settles/s: settles produced in-process by the ledger scripts (not over gRPC) over 16 tenants, cyclesd only archiving (~2 min) = bin/cycles-bench archive -load ledger -phases drain,lag -lag-rate 3000 -lag-for 60s
	$(GO) build -o bin/ ./cmd/cyclesd ./cmd/cycles-bench
	bin/cycles-bench archive -cyclesd bin/cyclesd -load ledger -phases drain,lag -lag-rate 3000 -lag-for 60s -out $(BENCH_OUT)/archive-ledger.json $(BENCH_FLAGS)

.PHONY: bench-gogc
bench-gogc: deps ## cyclesd CPU per reserve at 50 clients, GOGC=100 vs 400, interleaved over 3 rounds (~1 min) = bin/cycles-bench gogc -values 100,400 -rounds 3
	$(GO) build -o bin/ ./cmd/cyclesd ./cmd/cycles-bench
	bin/cycles-bench gogc -cyclesd bin/cyclesd -values 100,400 -rounds 3 -out $(BENCH_OUT)/gogc.json $(BENCH_FLAGS)

.PHONY: bench-go
bench-go: deps ## Run the Go benchmarks (go test -bench)
	$(GO) test -run '^$$' -bench . -benchmem ./...
