# capper's developer entry points. `make test` is the test command CI runs
# (.ci/run); it installs what it needs when missing (scripts/ensure-deps.sh).

GO        ?= go
BIN       := $(CURDIR)/.bin
PKGS      := ./...
# make test fails, instead of skipping, when a server binary is missing.
export CAPPER_REQUIRE_SERVERS := 1

.PHONY: test deps fmt-check vet staticcheck unit bench build

test: deps fmt-check vet staticcheck unit

deps:
	@scripts/ensure-deps.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

staticcheck: deps
	$(BIN)/staticcheck $(PKGS)

unit:
	$(GO) test -race -timeout 45m $(PKGS)

build:
	$(GO) build -o $(BIN)/ ./cmd/...

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem -timeout 60m $(PKGS)
