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

# Test budget: the whole suite must stay well inside CI's limit on 2 cores.
TEST_TIMEOUT ?= 20m
TEST_FLAGS   ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}'

.PHONY: deps
deps: ## Install redis-server with apt when it is missing
	@if ! command -v redis-server >/dev/null 2>&1; then \
	  echo "redis-server not found; installing it with apt"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo"; \
	  if command -v apt-get >/dev/null 2>&1; then \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-server >/dev/null; \
	  else echo "please install redis-server (>= 7) and retry"; exit 1; fi; \
	fi
	@redis-server --version

.PHONY: tools
tools: ## Install buf, protoc-gen-go, protoc-gen-go-grpc and grpcurl (pinned) with go install
	$(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	$(GO) install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)

.PHONY: generate
generate: ## Regenerate gen/ from proto/ with local plugins
	@command -v buf >/dev/null || $(MAKE) tools
	buf lint
	rm -rf gen/cycles
	buf generate

.PHONY: lint
lint: ## buf lint, gofmt and go vet
	@command -v buf >/dev/null || $(MAKE) tools
	buf lint
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/'))" || { gofmt -l $$(git ls-files '*.go' | grep -v '^gen/'); exit 1; }
	$(GO) vet ./...

.PHONY: breaking
breaking: ## buf breaking against main
	buf breaking --against '.git#branch=main'

.PHONY: build
build: ## Build bin/cyclesd and the tools
	$(GO) build -o bin/ ./cmd/...

.PHONY: run
run: ## Start cyclesd in dev mode (embedded store, seeded demo tenant; prints grpcurl commands)
	$(GO) run ./cmd/cyclesd $(ARGS)

# Suites that also run against a local 3-master Redis Cluster.
CLUSTER_SUITES ?= ./pkg/ledger/... ./pkg/sweeper/... ./pkg/events/... ./pkg/ratelimit/... ./pkg/admin/... ./pkg/api/... ./test/ledgertest/... ./test/redistest/...

.PHONY: test
test: deps ## Run every test (starts its own redis-server processes), then the domain suites on a Cluster
	$(GO) vet ./...
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) ./...
	$(MAKE) --no-print-directory test-cluster

.PHONY: test-cluster
test-cluster: deps ## Run the ledger, sweeper, event, limiter and admin suites against a real 3-master Cluster
	CYCLES_TEST_REDIS=cluster $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) $(CLUSTER_SUITES)

.PHONY: test-race
test-race: deps ## Run every test with the race detector
	$(GO) test -race -count=1 -timeout 30m ./...

.PHONY: bench
bench: deps ## Run the Go benchmarks
	$(GO) test -run '^$$' -bench . -benchmem ./...
