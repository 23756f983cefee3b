# switchyard build, test, demo and benchmarks. Run as root on Debian; `make deps` installs what the
# build and the tests need, each bench target installs its own peers.
# GO builds this module: the go on PATH when it is at least go.mod's version, else the official
# toolchain that tools/go.sh fetches from GOPROXY once, checks against tools/go-toolchain.sum
# and caches (worked out when a target first needs it, so `make clean` fetches nothing).
# GOENV puts that go first on PATH for what runs `go` itself (tests, go generate, benches).
GO        ?= $(eval GO := $(shell tools/go.sh))$(GO)
GOENV      = PATH="$(dir $(GO)):$$PATH"
BIN       := bin/switchyard
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
LDFLAGS   := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# BPF_CLANG_MAJOR is the clang that builds the committed BPF objects (Debian 12's clang-14): another
# major version emits other bytes, and CI's drift check would fail on a correct tree.
BPF_CLANG_MAJOR := 14
BPF_CLANG ?= clang-$(BPF_CLANG_MAJOR)
APT_DEPS  := clang llvm clang-$(BPF_CLANG_MAJOR) llvm-$(BPF_CLANG_MAJOR) libbpf-dev bpftool iproute2 ethtool dnsutils bind9-dnsutils nftables curl etcd-server etcd-client bird2 nsd knot knot-dnsutils knot-dnssecutils bind9 nghttp2-client zsh systemd chromium prometheus python3-grpcio python3-h2 python3-wsproto
TEST_FLAGS ?= -count=1 -timeout 30m

.PHONY: install deb all build generate webui-vendor deps check-go check-clang test test-short fuzz demo demo-down bench bench-smoke bench-xdp bench-l4 bench-l4scale bench-l7 bench-edge bench-edgescale bench-dns bench-dnsscale clean

all: build

build: check-go
	$(GOENV) $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/switchyard

# generate rebuilds the BPF objects and their Go bindings with bpf2go (needs clang; `make deps`).
# The outputs are committed so that `go build` needs no clang; CI regenerates and fails on drift.
# It builds with $(BPF_CLANG), which must be clang $(BPF_CLANG_MAJOR) (check-clang), and with -nostdinc
# on the headers vendored in bpf/include/vendor only. The go:generate lines are in
# loader/third_party/bpfobj/gen.go, and the outputs land there (package bpfobj).
generate: check-go check-clang
	$(GOENV) BPF2GO_CC=$(BPF_CLANG) $(GO) generate ./loader/...

# check-clang fails when $(BPF_CLANG) is missing or not clang $(BPF_CLANG_MAJOR), and says what to install.
check-clang:
	@v=$$($(BPF_CLANG) --version 2>/dev/null | sed -n 's/.*clang version \([0-9][0-9]*\)\..*/\1/p' | head -n 1); \
	if [ "$$v" != "$(BPF_CLANG_MAJOR)" ]; then \
		echo "make generate builds the BPF objects with clang $(BPF_CLANG_MAJOR); $(BPF_CLANG) is $${v:+clang $$v}$${v:-missing or not clang}:" >&2; \
		echo "  apt-get install clang-$(BPF_CLANG_MAJOR) llvm-$(BPF_CLANG_MAJOR) (make deps does), or point BPF_CLANG=... at a clang $(BPF_CLANG_MAJOR) binary" >&2; \
		exit 1; \
	fi
	@echo "using $(BPF_CLANG) (clang $(BPF_CLANG_MAJOR))"

# webui-vendor refreshes the committed copy of uPlot that the web UI embeds (npm pack; version,
# sha256 and licence in internal/webui/vendor/VERSION; UPLOT_VERSION=x.y.z picks another). The
# build never runs it: it uses the committed files, and nothing is fetched at run time.
webui-vendor:
	internal/webui/vendor.sh

# deps installs the Debian packages the build, the lab and the tests use. Idempotent.
deps: check-go
	@missing=""; for p in $(APT_DEPS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

# check-go fails early when tools/go.sh found or fetched no usable Go (it said why on stderr).
check-go:
	@test -n "$(GO)" || { echo "no usable Go: see the go.sh message above (it needs curl and perl, which comes with git)" >&2; exit 1; }
	@echo "using $(GO) ($$($(GO) env GOVERSION))"

# test runs the whole suite, including the root-only network-namespace end-to-end tests (they
# skip with a message when not root).
test: deps
	$(GOENV) $(GO) vet ./...
	$(GOENV) $(GO) test $(TEST_FLAGS) ./...

# fuzz runs every fuzz target of the repository (each func FuzzX in a _test.go file), one after
# another, for FUZZTIME each on top of its seed corpus (testdata/fuzz and f.Add). Minimising each
# new input is capped at FUZZMINIMIZE: at Go's default (60 s) it took most of a short run. A run
# that ends in a bare "context deadline exceeded" with no failing input written is Go 1.26's
# coordinator race (golang/go#75804), reported and not failed; any input found still fails.
FUZZTIME ?= 20s
FUZZMINIMIZE ?= 1s
fuzz: check-go
	@set -e; for f in $$(grep -rl --include='*_test.go' '^func Fuzz' . | sort); do \
		dir=./$$(dirname $${f#./}); \
		for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "== fuzz $$dir $$t ($(FUZZTIME))"; \
			out=$$($(GOENV) $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) $$dir 2>&1) && rc=0 || rc=$$?; \
			echo "$$out"; \
			if [ $$rc -ne 0 ]; then \
				if echo "$$out" | grep -q 'context deadline exceeded' && ! echo "$$out" | grep -q 'Failing input written'; then \
					echo "== fuzz $$t: the fuzz time ran out mid-call (Go's coordinator race, golang/go#75804, fixed in Go 1.27): no failing input, not a finding"; \
				else exit $$rc; fi; \
			fi; \
		done; \
	done

# test-short skips the slow lab experiments and end-to-end runs.
test-short: check-go
	$(GOENV) $(GO) test -short -count=1 ./...

demo: deps build
	$(GOENV) ./$(BIN) lab demo

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
		BENCH_SMOKE=1 $(MAKE) --no-print-directory GO=$(GO) bench-$$s || { echo "bench-smoke: bench-$$s failed" >&2; exit 1; }; \
		echo "== bench-$$s (smoke) passed in $$(( $$(date +%s) - t )) s"; \
	done; echo "bench-smoke: every stop passed in $$(( $$(date +%s) - start )) s"

bench-xdp: build
	$(GOENV) bash bench/xdp.sh
bench-l4: deps build
	$(GOENV) bash bench/l4.sh
# bench-l4scale: the L4 control plane at 16, 256 and 4,096 VIPs (cold start, adopt, drain, vip add,
# ring memory, daemon memory); one benchmark at a time on the machine.
bench-l4scale: build
	$(GOENV) flock /tmp/switchyard-bench.lock bash bench/l4scale.sh
bench-l7: build
	$(GOENV) bash bench/l7.sh
bench-edge: build
	$(GOENV) bash bench/edge.sh
# bench-edgescale: RSS per object, GC and hit p99 at 10k and 1M objects, purge costs (edge).
bench-edgescale:
	$(GOENV) bash bench/edgescale.sh
bench-dns: build
	$(GOENV) bash bench/dns.sh
# bench-dnsscale: 100,000 small zones (and a catalog) in switchyard, NSD and Knot: start time, memory
# per zone above its records, one zone's reload and update beside the others.
bench-dnsscale: build
	$(GOENV) flock /tmp/switchyard-bench.lock bash bench/dnsscale.sh

# install puts the binary, the systemd units, the example configurations (never over existing
# ones) and the bash and zsh completion under DESTDIR, PREFIX (docs in README "Install").
PREFIX     ?= /usr/local
DESTDIR    ?=
BINDIR     ?= $(PREFIX)/bin
SYSCONFDIR ?= /etc
UNITDIR    ?= $(PREFIX)/lib/systemd/system
install: build
	install -Dm0755 $(BIN) $(DESTDIR)$(BINDIR)/switchyard
	@for u in deploy/systemd/*.service; do \
		install -d $(DESTDIR)$(UNITDIR); \
		sed 's|@BINDIR@|$(BINDIR)|g' $$u > $(DESTDIR)$(UNITDIR)/$$(basename $$u); \
		chmod 0644 $(DESTDIR)$(UNITDIR)/$$(basename $$u); echo "installed $(DESTDIR)$(UNITDIR)/$$(basename $$u)"; \
	done
	@cd deploy/etc && for f in $$(find switchyard -type f); do \
		d=$(DESTDIR)$(SYSCONFDIR)/$$f; \
		if [ -e $$d ]; then echo "kept $$d (exists)"; else install -Dm0644 $$f $$d; echo "installed $$d"; fi; \
	done
	install -d $(DESTDIR)$(PREFIX)/share/bash-completion/completions $(DESTDIR)$(PREFIX)/share/zsh/vendor-completions
	$(BIN) completion bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/switchyard
	$(BIN) completion zsh > $(DESTDIR)$(PREFIX)/share/zsh/vendor-completions/_switchyard
	install -Dm0644 -t $(DESTDIR)$(PREFIX)/share/doc/switchyard README.md docs/*.md

# deb builds bin/switchyard_<version>_<arch>.deb with dpkg-deb: `make install` into a staging
# root with PREFIX=/usr, the example configurations as conffiles, postinst creating the
# example instances' admin tokens.
DEB_VERSION ?= 0.0~git$(shell git log -1 --format=%cd --date=format:%Y%m%d 2>/dev/null).$(COMMIT)
DEB_ARCH    := $(shell dpkg --print-architecture 2>/dev/null || echo amd64)
DEB_STAGE   := bin/deb
DEB_OUT     ?= bin/switchyard_$(DEB_VERSION)_$(DEB_ARCH).deb
deb: build
	@command -v dpkg-deb >/dev/null || { echo "make deb: dpkg-deb not found: apt-get install -y dpkg-dev (or dpkg)" >&2; exit 1; }
	rm -rf $(DEB_STAGE)
	$(MAKE) --no-print-directory GO=$(GO) install DESTDIR=$(CURDIR)/$(DEB_STAGE) PREFIX=/usr UNITDIR=/lib/systemd/system
	install -d $(DEB_STAGE)/DEBIAN
	sed -e 's|@VERSION@|$(DEB_VERSION)|' -e 's|@ARCH@|$(DEB_ARCH)|' deploy/debian/control.in > $(DEB_STAGE)/DEBIAN/control
	cd $(DEB_STAGE) && find etc -type f | sed 's|^|/|' | sort > DEBIAN/conffiles
	install -m0755 deploy/debian/postinst deploy/debian/postrm $(DEB_STAGE)/DEBIAN/
	dpkg-deb --build --root-owner-group $(DEB_STAGE) $(DEB_OUT)

clean:
	rm -rf bin bench/out
