# threadbox — build, test and run targets. `make test` is the test command CI runs.
SHELL := /bin/bash
GO    ?= go
BIN   := bin

.PHONY: ui-vendor build run test test-short lint bench soak chaos sandbox-image agent clean

build: agent
	$(GO) build -o $(BIN)/threadbox ./cmd/threadbox

agent:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/threadbox-agent ./cmd/threadbox-agent

# A single-user development run: it lists the local development jail as a
# fallback explicitly (serve's default is docker alone) and says so.
# SANDBOX_BACKEND in the environment wins.
# With a Docker daemon and no sandbox image, the image is built first (the
# offline build, once); `threadbox doctor` then says what else is missing.
run: build
	@if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 && ! docker image inspect "$${SANDBOX_IMAGE:-threadbox-sandbox:latest}" >/dev/null 2>&1; then \
	  echo "make run: no sandbox image yet: building it from Debian's packages (once; about 10 minutes)"; \
	  $(MAKE) sandbox-image; \
	fi
	@b="$${SANDBOX_BACKEND:-docker,local}"; \
	echo "make run: SANDBOX_BACKEND=$$b (a single-user development run; the local backend is a development jail, not for untrusted code)"; \
	SANDBOX_BACKEND="$$b" $(BIN)/threadbox doctor || true; \
	SANDBOX_BACKEND="$$b" exec $(BIN)/threadbox serve

# The full suite: starts a throwaway PostgreSQL cluster when TEST_DATABASE_URL is unset.
test: agent
	./scripts/test.sh

lint:
	./scripts/lint.sh
	./scripts/ui-vendor.sh --check

# The frontend's vendored third-party modules (web/ui/vendor), from the
# versions pinned in web/uideps.
ui-vendor:
	./scripts/ui-vendor.sh

bench: build
	./scripts/bench.sh

# Reliability (issue 24), not part of `make test`: simulated users over
# a threadbox on Docker; SOAK_FLAGS adds flags (-users, -duration, -seed,
# -database-url, -pg-data, -faults, ...). See README, Reliability.
SOAK_FLAGS ?=
soak: build
	$(GO) build -o $(BIN)/threadbox-soak ./cmd/threadbox-soak
	$(BIN)/threadbox-soak $(SOAK_FLAGS)

chaos: build
	$(GO) build -o $(BIN)/threadbox-soak ./cmd/threadbox-soak
	$(BIN)/threadbox-soak -chaos $(SOAK_FLAGS)

sandbox-image: agent
	./sandbox/build-offline.sh

clean:
	rm -rf $(BIN)
