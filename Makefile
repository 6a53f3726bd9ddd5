# capper's developer entry points. `make test` is the test command CI runs
# (.ci/run); it installs what it needs when missing (scripts/ensure-deps.sh).

GO        ?= go
BIN       := $(CURDIR)/.bin
PKGS      := ./...
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
IMAGE     ?= capper
# make test fails, instead of skipping, when a server binary is missing.
export CAPPER_REQUIRE_SERVERS := 1

.PHONY: test deps fmt-check vet staticcheck chart rules unit later bench soak build image docs

test: deps fmt-check vet staticcheck chart unit

deps:
	@scripts/ensure-deps.sh --helm

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

staticcheck: deps
	$(BIN)/staticcheck $(PKGS)

# Quick chart check; go test ./deploy/ also decodes every manifest strictly,
# validates the rendered config with capper's own loader, checks that the
# render refuses every config capper refuses, and checks the dashboard and
# alerts against the metrics a real worker registers.
chart: deps
	$(BIN)/helm lint --strict deploy/helm/capper
	$(BIN)/helm lint --strict deploy/helm/capper -f deploy/helm/capper/ci/all-on-hpa-values.yaml
	$(BIN)/helm lint --strict deploy/helm/capper -f deploy/helm/capper/ci/all-on-keda-values.yaml
	$(BIN)/helm template capper deploy/helm/capper > /dev/null
	@# An invalid capper config must fail the render, naming the key.
	@if out=$$($(BIN)/helm template capper deploy/helm/capper --set config.worker.batch_size=0 2>&1 >/dev/null); then \
		echo "chart: config.worker.batch_size=0 rendered; the chart must refuse it"; exit 1; \
	fi; case "$$out" in *worker/batch_size*) ;; *) echo "chart: the error does not name worker.batch_size:"; echo "$$out"; exit 1;; esac

# The alerts' promtool unit tests alone (deploy/prometheus/alerts_test.yaml
# against the rendered PrometheusRule). `make test` runs them in unit, with
# the rest of ./deploy/; this target is the quick loop while editing alerts.
rules: deps
	$(GO) test -count=1 -run '^TestAlertRules$$' ./deploy/

unit:
	$(GO) test -race -timeout 45m $(PKGS)

# The tests as if today were DAYS days later (default 400): both the Go
# code's clock and every test redis-server's are moved (scripts/later.sh;
# CONTRIBUTING.md "Dates and clocks in tests"). Not part of `make test`.
later: deps
	scripts/later.sh

# The fault soak (internal/soak, CONTRIBUTING.md): the real binaries, real
# servers and faults chosen by SEED, for DURATION seconds of traffic, then
# every promise checked on what the topics hold. A failing seed replays.
# `make test` runs one short soak (seed 8, 30 s).
SEED     ?= $(shell date +%s)
DURATION ?= 90
soak: deps
	CAPPER_SOAK_SEED=$(SEED) CAPPER_SOAK_DURATION=$(DURATION) $(GO) test -count=1 -v -run '^TestSoak$$' -timeout 30m ./internal/soak/

# Every benchmark of the project, with the figures and their ratios to the
# targets or peers measured in the same run (-v: the tables some print are
# longer than the 10 lines go test keeps otherwise).
bench: deps
	$(GO) test -v -run '^$$' -bench . -benchmem -timeout 90m $(PKGS)

# The pages generated from the code: docs/reference/cli.md, from the
# command lines of capper and segment-builder (their hidden `docs cli`
# command: the grammar's help texts and the notes in cmd/*/clidoc.md).
# TestCLIReference (cmd/capper, cmd/segment-builder) fails when it differs.
docs:
	@{ $(GO) run ./cmd/capper docs cli && echo && $(GO) run ./cmd/segment-builder docs cli; } > docs/reference/cli.md.tmp \
		&& mv docs/reference/cli.md.tmp docs/reference/cli.md || { rm -f docs/reference/cli.md.tmp; exit 1; }

build:
	$(GO) build -ldflags "-X main.version=$(VERSION) -X main.revision=$(REVISION)" -o $(BIN)/ ./cmd/...

image:
	docker build --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t $(IMAGE):$(VERSION) .
