# threadbox — build, test and run targets. `make test` is the test command CI runs.
SHELL := /bin/bash
GO    ?= go
BIN   := bin

.PHONY: ui-vendor build run test test-short test-microvm race lint bench soak chaos sandbox-image microvm-guest agent clean

build: agent
	$(GO) build -o $(BIN)/threadbox ./cmd/threadbox

agent:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/threadbox-agent ./cmd/threadbox-agent

# A single-user development run (`threadbox dev`, cmd/threadbox/dev.go):
# unless SANDBOX_BACKEND is set it prepares a sandbox backend — with Docker,
# the sandbox image when it is missing (the offline build, with its progress
# and a time estimate); without Docker, as root with debootstrap and
# bubblewrap, the local development jail's root filesystem — or else serves
# with code execution off and prints one line saying what to install. Then
# it runs `threadbox doctor` and serves. See docs/backends.md.
run: build
	exec $(BIN)/threadbox dev

# The full suite: starts a throwaway PostgreSQL cluster when TEST_DATABASE_URL is unset.
test: agent
	./scripts/test.sh

# The whole suite under the race detector, with the same services as
# `make test`; not part of CI (docs/testing.md says what each part takes).
race: agent
	./scripts/test.sh -race

lint:
	./scripts/lint.sh
	[ ! -x scripts/ui-vendor.sh ] || ./scripts/ui-vendor.sh --check

# The frontend's vendored third-party modules (web/ui/vendor), from the
# versions pinned in web/uideps.
ui-vendor:
	./scripts/ui-vendor.sh

bench: build
	./scripts/bench.sh

# Reliability runs, not part of `make test`: simulated users over a
# threadbox on Docker; SOAK_FLAGS adds flags (-users, -duration, -seed,
# -database-url, -pg-data, -faults, ...). See docs/reliability.md.
SOAK_FLAGS ?=
soak: build
	$(GO) build -o $(BIN)/threadbox-soak ./cmd/threadbox-soak
	$(BIN)/threadbox-soak $(SOAK_FLAGS)

chaos: build
	$(GO) build -o $(BIN)/threadbox-soak ./cmd/threadbox-soak
	$(BIN)/threadbox-soak -chaos $(SOAK_FLAGS)

# One build at a time: CI starts one in the background beside lint, and
# scripts/test.sh runs this again before the tests that boot sandboxes,
# waiting for it (then the image is current and nothing is done). The lock
# is taken here rather than in build-offline.sh, whose text is part of the
# image's recipe.
sandbox-image: agent
	flock $${TMPDIR:-/tmp}/threadbox-sandbox-image.lock ./sandbox/build-offline.sh

# The microvm backend's guest kernel, modules and busybox, from Debian
# packages, into the same cache as the sandbox image's root filesystem
# (docs/microvm.md).
microvm-guest:
	./sandbox/microvm-guest.sh

# The whole sandbox conformance suite on the microvm backend (make test
# runs a part of it: under emulation each VM boots in seconds). Set
# MICROVM_ACCEL=kvm on a host whose KVM runs the guest kernel; the default
# here is emulation (tcg).
test-microvm: agent
	THREADBOX_AGENT_BIN=$(CURDIR)/$(BIN)/threadbox-agent MICROVM_CONFORMANCE=full $(GO) test -count=1 -timeout 60m -v ./infra/sandbox/microvm
	THREADBOX_AGENT_BIN=$(CURDIR)/$(BIN)/threadbox-agent MICROVM_CONFORMANCE=full $(GO) test -count=1 -timeout 10m -v -run TestSandboxToolsMicroVM ./cmd/threadbox

clean:
	rm -rf $(BIN)
