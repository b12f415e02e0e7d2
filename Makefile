# sluice — the front door. Every command a person needs, nothing that only
# works on the author's machine.

GO       ?= go
PKGS     ?= ./...
# staticcheck is pinned and run with `go run`, so nothing is installed.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Go's race detector needs cgo.
export CGO_ENABLED := 1

.PHONY: all deps test test-short bench bench-http bench-smoke bench-go lint cover demo rls sluice check-config tidy image

## IMAGE_ENV, IMAGE_GOFLAGS: how the binaries a container image holds are
## built (make image): static (no cgo: no ELF interpreter or libc to find
## in a FROM scratch image) and without symbol table or DWARF (-s, which
## implies -w since Go 1.22). The tests of cmd/sluice, cmd/sluice-rls and
## examples/demo build the binaries they run the same way: internal/cmdtest
## reads these two lines, so keep each a plain list of words (no quotes).
## Not -trimpath: it changes how every package compiles, and the tests
## would compile the module and its dependencies once more (about two
## CPU-minutes on a cold CI run, against one for CGO_ENABLED=0 alone); the
## binary keeps the build directory's paths in its stack traces.
IMAGE_ENV     := CGO_ENABLED=0
IMAGE_GOFLAGS := -ldflags=-s

## NOCGO: the environment of every build that is not under the race
## detector (vet, staticcheck, the race-free test pass, the bench module's
## vet, the fuzz binaries): the image's (IMAGE_ENV), so that the standard
## library and the dependencies are compiled once for them and for the
## binaries that the tests of cmd/sluice, cmd/sluice-rls and examples/demo
## build as the image does (with CGO_ENABLED=1 they were compiled twice:
## about two minutes of a cold CI run on two cores).
NOCGO := CGO_ENABLED=0

all: lint test

## deps: install what the tests need on a fresh Debian machine (redis-server
## from Debian's packages, Go modules).
deps:
	@if ! command -v redis-server >/dev/null 2>&1; then \
		echo "installing redis-server (Debian package)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; \
	fi
	@redis-server --version
	$(GO) mod download

## FIRSTPKGS: the packages that have a benchmark, an allocation test or a
## ...NoRace test: the race-free pass builds only these (building and
## linking the others' test binaries, and running their TestMain, which for
## cmd/ builds the binaries, would cost a cold run a minute for nothing).
FIRSTPKGS ?= $(if $(filter ./...,$(PKGS)),$(shell grep -rlE '^func (Benchmark|Test[A-Za-z0-9_]*(Allocs|NoRace))' --include='*_test.go' --exclude-dir=bench --exclude-dir=testdata . | xargs -n1 dirname | sort -u),$(PKGS))

## test: set up, then run every test with the race detector. Integration
## tests start their own redis-server processes on loopback ports (or use
## REDIS_URL / REDIS_CLUSTER_ADDRS); with CI=true a missing Redis fails.
## A first pass, built without the race detector (which allocates on its
## own and makes sync.Pool drop objects at random), runs the allocation
## tests, the tests that need a race-free build (named ...NoRace) and every
## benchmark once, so that none rots (the drills', internal/drills, alone
## after the others: their overload drills load the CPU themselves, with a
## hog they start and stop, and hold the service to 0 decisions not the
## store's; another package's tests beside them would be a second hog,
## docs/adr/008); then everything runs under the race detector; then every
## fuzz target for a few seconds (fuzz-smoke); then the bench module's
## smoke test (bench-smoke).
test: deps
	$(NOCGO) $(GO) test -count=1 -run 'Allocs|NoRace' -bench . -benchtime 1x -timeout 5m $(filter-out ./internal/drills,$(FIRSTPKGS))
	$(if $(filter ./internal/drills,$(FIRSTPKGS)),$(NOCGO) $(GO) test -count=1 -run 'Allocs|NoRace' -bench . -benchtime 1x -timeout 5m ./internal/drills)
	$(GO) test -race -shuffle=on -count=1 -timeout 12m $(if $(filter ./...,$(PKGS)),$(LONGPKGS)) $(PKGS)
	$(MAKE) --no-print-directory fuzz-smoke
	$(MAKE) --no-print-directory bench-smoke

## LONGPKGS: the packages whose tests take longest under the race
## detector, named first so that go test starts them first (it runs the
## packages in the order given, -p at a time): last, they ran alone for a
## minute and a half at the end of the pass.
LONGPKGS = ./internal/drills ./adapters/redis ./app ./adapters/local

## fuzz-smoke: run every fuzz target for FUZZTIME (default 10000 inputs,
## about a second each here; `make fuzz-smoke FUZZTIME=200000x` for more)
## beyond its committed seed corpus
## (testdata/fuzz/<FuzzName>/, which plain `go test` runs too). A crash is
## written to the package's testdata/fuzz: commit it, it becomes a
## regression test.
## The budget is a count of inputs, not a duration: with a duration, Go
## 1.26's fuzz coordinator can report its own deadline as a failure
## ("context deadline exceeded", no failing input) when a loaded machine
## keeps a worker busy past it (golang/go#75804, fixed in Go 1.27); a count
## has no deadline to race.
## `go test -fuzz` takes one package and one target at a time and links a
## fuzz-instrumented test binary each time; here each package's binary is
## built once (`go test -c -fuzz`, the same instrumentation) and run, in
## the package's directory as go test would, once per target, with the
## fuzz cache go test uses ($GOCACHE/fuzz/<import path>).
## FUZZTARGETS: package directory:target,target,...; a fuzz target of the
## module left out of it fails the recipe.
FUZZTIME ?= 10000x
FUZZTARGETS = \
	domain:FuzzValidateRoute,FuzzNormaliseIdentifier,FuzzParseClientIP,FuzzNormaliseIP \
	app:FuzzParseConfig,FuzzEvaluate \
	adapters/redis:FuzzDecode \
	adapters/httpmw:FuzzClientIP,FuzzForwardedRoundTrip,FuzzRefusalHeaders
.PHONY: fuzz-smoke
fuzz-smoke:
	@set -e; \
	for f in $$(grep -rhoE '^func Fuzz[A-Za-z0-9_]*' --include='*_test.go' --exclude-dir=bench --exclude-dir=testdata . | cut -c6-); do \
		case ",$$(echo '$(FUZZTARGETS)' | tr ' :' ',,')," in *",$$f,"*) ;; \
		*) echo "fuzz-smoke: $$f is not in FUZZTARGETS"; exit 1;; esac; \
	done; \
	bin=$$(mktemp -d); trap 'rm -rf "$$bin"' EXIT; \
	cache=$$($(GO) env GOCACHE)/fuzz; \
	for spec in $(FUZZTARGETS); do \
		pkg=$${spec%%:*}; \
		echo "$(NOCGO) $(GO) test -c -fuzz . -o $$bin/fuzz.test ./$$pkg"; \
		$(NOCGO) $(GO) test -c -fuzz . -o "$$bin/fuzz.test" "./$$pkg"; \
		path=$$($(GO) list "./$$pkg"); \
		for target in $$(echo "$${spec#*:}" | tr , ' '); do \
			echo "fuzz $$target ($$path, -fuzztime $(FUZZTIME))"; \
			(cd "$$pkg" && "$$bin/fuzz.test" -test.paniconexit0 -test.timeout 10m -test.run '^$$' \
				-test.fuzz "^$$target\$$" -test.fuzztime $(FUZZTIME) -test.fuzzminimizetime 10s \
				-test.fuzzcachedir "$$cache/$$path"); \
		done; \
	done

## bench: sluice side by side with its peers and the floor script (bench/,
## its own module, so the peers stay out of go.mod): starts a private
## redis-server, drives every shape at concurrency 1, 16, 64 and 256, runs
## the HTTP load test (bench-http) and the in-process benchmarks, and
## rewrites docs/BENCHMARKS.md's generated block, docs/bench/redis.svg,
## docs/bench/http.svg and docs/bench/results.json. About 35 minutes; run
## it on a quiet machine.
## BENCHFLAGS adds flags, e.g. BENCHFLAGS='-duration 10s -shapes
## log-9,gcra-9 -http=false'.
bench: deps
	cd bench && $(GO) run ./cmd/sluicebench -command 'make bench' \
		-json ../docs/bench/results.json -chart ../docs/bench/redis.svg \
		-http-chart ../docs/bench/http.svg -doc ../docs/BENCHMARKS.md $(BENCHFLAGS)

## bench-http: the HTTP load test alone: builds examples/demo, starts it
## on a private redis-server with the nine-window profile on its search
## route, and drives it over HTTP on loopback at rising fixed rates
## (vegeta, open loop) until a rate is not held; prints p50/p99/p99.9 per
## rate and the highest rates with p99 <= 5 ms and <= 10 ms. Writes no
## file. About 3 minutes, e.g. BENCHFLAGS='-http-rates 1000,2000,4000
## -http-duration 20s -http-target-rate 2000'.
bench-http: deps
	cd bench && $(GO) run ./cmd/sluicebench -command 'make bench-http' \
		-redis-shapes=false -inproc=false $(BENCHFLAGS)

## bench-smoke: vet the bench module, run its tests (every shape for a
## few hundred requests against a real Redis, and the HTTP load test at two
## low rates for a second each: the outputs' form, never their speed) and
## its benchmarks once, in one pass under the race detector (the module
## has no allocation test, so one build serves both). make test runs it.
bench-smoke: deps
	cd bench && $(NOCGO) $(GO) vet ./... && \
		$(GO) test -race -shuffle=on -count=1 -bench . -benchtime 1x -timeout 5m ./...

## bench-go: every Go benchmark of the main module's packages, with
## allocations, compared within one run.
bench-go: deps
	$(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 20m $(PKGS)

## demo: run the demo service (HTTP on 127.0.0.1:8080, gRPC on
## 127.0.0.1:9090) on the embedded local store, or on Redis with REDIS_URL.
## -dev generates a throw-away HMAC secret unless RATE_LIMIT_HMAC_SECRET is
## set (sluice itself has no default). Ctrl-C stops it.
demo:
	$(GO) run ./examples/demo -dev

## rls: run sluice-rls, Envoy's global rate-limit service (gRPC :8081,
## /healthcheck :8080, /metrics :9090), with deploy/envoy/config, on the
## embedded local store, or on Redis with REDIS_URL. -dev as for demo.
rls:
	$(GO) run ./cmd/sluice-rls -config deploy/envoy/config -dev

## sluice: install the operator's tool, cmd/sluice (check, explain, peek,
## reset), into $(go env GOPATH)/bin; `go install
## github.com/sluicehq/sluice/cmd/sluice@latest` does the same from
## anywhere.
sluice:
	$(GO) install ./cmd/sluice
	@echo "installed: $$($(GO) env GOPATH)/bin/sluice (sluice --help)"

## check-config: `sluice check` on the shipped configurations, as a CI step
## before a deploy would run it: without RATE_LIMIT_HMAC_SECRET (the file
## is checked apart, a warning says so), and with Envoy's bootstrap beside
## sluice-rls's files (each rate_limits descriptor and the limit it reaches).
check-config:
	$(GO) run ./cmd/sluice check -config examples/demo/sluice.yaml \
		-expose-file cmd/sluice/testdata/demo-routes.txt -envoy-config deploy/envoy/config \
		-envoy-routes deploy/envoy/envoy.yaml

## lint: gofmt, go vet and staticcheck (pinned), on the module and on
## bench/.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(NOCGO) $(GO) vet $(PKGS)
	$(NOCGO) $(GO) run $(STATICCHECK) $(PKGS)
	cd bench && $(NOCGO) $(GO) vet ./... && $(NOCGO) $(GO) run $(STATICCHECK) ./...

## cover: every test with coverage, under the race detector as make test
## runs them, and the binaries that the tests of cmd/sluice, cmd/sluice-rls
## and examples/demo start, built with Go's integration coverage of every
## package of the module (SLUICE_COVERDIR: internal/cmdtest) and writing
## their profiles to COVERDIR/bin (world-writable: TestImage runs them as
## uid 65532 when root). Both are merged into coverage.out (the
## same block counted once: go tool cover merges them); prints each
## package's figure and the total, and fails under COVERMIN percent.
## `go tool cover -html=coverage.out` shows it line by line.
COVERMIN ?= 85
COVERDIR ?= $(CURDIR)/.cover
cover: deps
	rm -rf $(COVERDIR) && mkdir -p $(COVERDIR)/bin && chmod 1777 $(COVERDIR)/bin
	SLUICE_COVERDIR=$(COVERDIR)/bin $(GO) test -race -count=1 -timeout 12m \
		-covermode=atomic -coverprofile=$(COVERDIR)/unit.out $(PKGS)
	$(GO) tool covdata textfmt -i=$(COVERDIR)/bin -o $(COVERDIR)/bin.out
	{ cat $(COVERDIR)/unit.out; tail -n +2 $(COVERDIR)/bin.out; } > coverage.out
	@awk -F'[: ]' 'NR > 1 { k = $$1 ":" $$2; n[k] = $$3; if ($$4 > 0) hit[k] = 1; f[k] = $$1 } \
		END { for (k in n) { p = f[k]; sub("/[^/]*$$", "", p); all[p] += n[k]; if (k in hit) cov[p] += n[k] } \
		for (p in all) printf "%-56s %5.1f%% of %d statements\n", p, 100 * cov[p] / all[p], all[p] }' coverage.out | sort
	@$(GO) tool cover -func=coverage.out | tail -n 1 | awk -v min=$(COVERMIN) \
		'{ print "module total:", $$NF; if ($$NF + 0 < min) { print "coverage is under " min "%"; exit 1 } }'

## image: the container images sluice-rls:IMAGE_TAG and sluice-demo:IMAGE_TAG
## (deploy/image: FROM scratch, one static binary built here with
## IMAGE_ENV and IMAGE_GOFLAGS, the root CAs of this machine for rediss://,
## uid 65532), with podman, buildah or docker, the first one installed
## (IMAGE_TOOL=docker to choose). Debian: apt-get install buildah.
IMAGE_TOOL ?= $(firstword $(foreach t,podman buildah docker,$(if $(shell command -v $(t) 2>/dev/null),$(t))))
IMAGE_TAG  ?= latest
CA_BUNDLE  ?= /etc/ssl/certs/ca-certificates.crt
image:
	@[ -n "$(IMAGE_TOOL)" ] || { echo "make image: needs podman, buildah or docker (Debian: apt-get install buildah)"; exit 1; }
	@[ -r "$(CA_BUNDLE)" ] || { echo "make image: no $(CA_BUNDLE) (Debian: apt-get install ca-certificates)"; exit 1; }
	rm -rf bin/image && mkdir -p bin/image
	cp $(CA_BUNDLE) bin/image/ca-certificates.crt
	env $(IMAGE_ENV) $(GO) build $(IMAGE_GOFLAGS) -o bin/image/ ./cmd/sluice-rls ./examples/demo
	$(IMAGE_TOOL) build -f deploy/image/sluice-rls.Containerfile -t sluice-rls:$(IMAGE_TAG) bin/image
	$(IMAGE_TOOL) build -f deploy/image/demo.Containerfile -t sluice-demo:$(IMAGE_TAG) bin/image
