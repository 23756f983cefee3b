# switchyard build, test, demo and benchmarks. Run as root on Debian; `make deps` installs what the
# build and the tests need, each bench target installs its own peers.
GO        ?= go
BIN       := bin/switchyard
APT_DEPS  := clang llvm libbpf-dev bpftool iproute2 ethtool dnsutils nftables curl etcd-server etcd-client bird2
TEST_FLAGS ?= -count=1 -timeout 30m

.PHONY: all build generate deps check-go test test-short fuzz demo demo-down bench bench-smoke bench-xdp bench-l4 bench-l4scale bench-l7 bench-edge bench-dns clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/switchyard

# generate rebuilds the BPF objects and their Go bindings with bpf2go (needs clang; `make deps`).
# The outputs are committed so that `go build` needs no clang; CI regenerates and fails on drift.
generate:
	$(GO) generate ./loader/...

# deps installs the Debian packages the build, the lab and the tests use. Idempotent.
deps: check-go
	@missing=""; for p in $(APT_DEPS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

# check-go fails early, with the fix, when no usable Go is on PATH. Go 1.21 or newer fetches the
# toolchain go.mod names by itself (GOTOOLCHAIN=auto).
check-go:
	@command -v $(GO) >/dev/null 2>&1 || { echo "no Go on PATH: install Go 1.21 or newer (Debian 13: apt-get install golang-go; Debian 12: the go.dev tarball in /usr/local/go, then export PATH=/usr/local/go/bin:\$$PATH)" >&2; exit 1; }
	@v=$$($(GO) env GOVERSION 2>/dev/null | sed 's/^go//'); case "$$v" in 1.1[0-9]*|1.20*|"") echo "Go $$v is too old: install Go 1.21 or newer (Debian 12: the go.dev tarball in /usr/local/go)" >&2; exit 1;; esac

# test runs the whole suite, including the root-only network-namespace end-to-end tests (they
# skip with a message when not root).
test: deps
	$(GO) vet ./...
	$(GO) test $(TEST_FLAGS) ./...

# fuzz runs every fuzz target of the repository (each func FuzzX in a _test.go file), one after
# another, for FUZZTIME each on top of its seed corpus (testdata/fuzz and f.Add). Minimising each
# new input is capped at FUZZMINIMIZE: at Go's default (60 s) it took most of a short run.
FUZZTIME ?= 20s
FUZZMINIMIZE ?= 1s
fuzz:
	@set -e; for f in $$(grep -rl --include='*_test.go' '^func Fuzz' . | sort); do \
		dir=./$$(dirname $${f#./}); \
		for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "== fuzz $$dir $$t ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) $$dir; \
		done; \
	done

# test-short skips the slow lab experiments and end-to-end runs.
test-short:
	$(GO) test -short -count=1 ./...

demo: deps build
	./$(BIN) lab demo

demo-down:
	-./$(BIN) lab down

bench: bench-xdp bench-l4 bench-l7 bench-edge bench-dns

# bench-smoke runs every stop's bench in its short mode (BENCH_SMOKE=1: one round of about a
# second per cell, the same checks, "smoke": true in bench/out/<stop>.json), one after another:
# a bench that breaks fails here (CI runs it) instead of waiting for the next full run. First the
# tests of the checks themselves (bench/lib_test.sh).
BENCH_STOPS := xdp l4 l7 edge dns
bench-smoke: build
	bash bench/lib_test.sh
	@start=$$(date +%s); for s in $(BENCH_STOPS); do \
		echo "== bench-$$s (smoke)"; t=$$(date +%s); \
		BENCH_SMOKE=1 $(MAKE) --no-print-directory bench-$$s || { echo "bench-smoke: bench-$$s failed" >&2; exit 1; }; \
		echo "== bench-$$s (smoke) passed in $$(( $$(date +%s) - t )) s"; \
	done; echo "bench-smoke: every stop passed in $$(( $$(date +%s) - start )) s"

bench-xdp: build
	bash bench/xdp.sh
bench-l4: deps build
	bash bench/l4.sh
# bench-l4scale: the L4 control plane at 16, 256 and 4,096 VIPs (cold start, adopt, drain, vip add,
# ring memory, daemon memory); one benchmark at a time on the machine.
bench-l4scale: build
	flock /tmp/switchyard-bench.lock bash bench/l4scale.sh
bench-l7: build
	bash bench/l7.sh
bench-edge: build
	bash bench/edge.sh
bench-dns: build
	bash bench/dns.sh

clean:
	rm -rf bin bench/out
