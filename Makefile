# Every package of the workspace (go.work): the module's own, and the nested
# modules that keep test-only dependencies out of an importer's module graph
# (bench, deploy, examples, the dashboard's browser tests). ./... alone stops
# at a nested module's go.mod.
PACKAGES = ./... ./bench/... ./deploy/... ./examples/... ./internal/dashboard/dashboardtest/...

.PHONY: stack test demo screenshot bench chaos attack build down fuzz release

# Fuzzing runs for a number of executions, not a time: Go 1.26's coordinator
# can report its own -fuzztime deadline as a failure ("context deadline
# exceeded", no input written; go.dev/issue/75804, fixed in Go 1.27). The
# minimiser gets a bounded time so one slow input cannot hold a run.
FUZZ_SHORT = -fuzztime=300000x -fuzzminimizetime=10s
FUZZ_LONG = -fuzztime=3000000x -fuzzminimizetime=30s

stack:
	scripts/stack up

test:
	scripts/stack up && scripts/stack up --cluster && scripts/stack up --secure && eval "$$(scripts/stack env)" && go test -race -count=1 -timeout 60m $(PACKAGES)
	go test ./event -run='^$$' -fuzz='^FuzzDecode$$' $(FUZZ_SHORT)
	go test ./event -run='^$$' -fuzz='^FuzzDecodeEncodedMatchesJSON$$' $(FUZZ_SHORT)
	go test ./internal/timespan -run='^$$' -fuzz='^FuzzParseDuration$$' $(FUZZ_SHORT)
	go test ./internal/decide -run='^$$' -fuzz='^FuzzParseQuery$$' $(FUZZ_SHORT)
	go test ./internal/decide -run='^$$' -fuzz='^FuzzRLSRequest$$' $(FUZZ_SHORT)
	go test ./internal/decide -run='^$$' -fuzz='^FuzzConnectRequest$$' $(FUZZ_SHORT)

demo:
	scripts/stack up && scripts/demo

# The README's screenshot of the dashboard, taken by the demo in Chromium.
screenshot:
	scripts/stack up && scripts/demo --stay=no --screenshot docs/img/dashboard.png

bench:
	scripts/stack up && scripts/bench

chaos:
	scripts/stack up && scripts/stack up --cluster && scripts/chaos

attack:
	scripts/stack up && scripts/attack

VERSION_PKG = github.com/floodgate-dev/floodgate/internal/version

build:
	go build -ldflags="-X $(VERSION_PKG).commit=$$(git rev-parse HEAD 2>/dev/null) -X $(VERSION_PKG).date=$$(git log -1 --format=%cI 2>/dev/null) -X $(VERSION_PKG).version=$$(git describe --tags --always 2>/dev/null)" -o bin/floodgate ./cmd/floodgate

down:
	scripts/stack down

fuzz:
	go test ./event -run='^$$' -fuzz='^FuzzDecode$$' $(FUZZ_LONG)
	go test ./event -run='^$$' -fuzz='^FuzzDecodeEncodedMatchesJSON$$' $(FUZZ_LONG)
	go test ./internal/timespan -run='^$$' -fuzz='^FuzzParseDuration$$' $(FUZZ_LONG)
	go test ./internal/decide -run='^$$' -fuzz='^FuzzParseQuery$$' $(FUZZ_LONG)
	go test ./internal/decide -run='^$$' -fuzz='^FuzzRLSRequest$$' $(FUZZ_LONG)
	go test ./internal/decide -run='^$$' -fuzz='^FuzzConnectRequest$$' $(FUZZ_LONG)

# The release (docs/operations.md, "Releases"): binaries for linux and darwin
# on amd64 and arm64, tar.gz archives, a CycloneDX SBOM per binary and
# SHA-256 checksums by GoReleaser (.goreleaser.yaml), then the container
# image from the Dockerfile by buildah (scripts/release-image), all in dist/.
# On a commit tagged vX.Y.Z that version (the tree must be clean); anywhere
# else a snapshot. The tools are pinned here and installed from the Go module
# proxy into bin/tools. BASE_IMAGE=local builds the image's base from this
# machine's files where no registry can be reached; IMAGE_PLATFORMS picks
# the image's platforms (default linux/amd64).
GORELEASER_VERSION = v2.17.0
CYCLONEDX_GOMOD_VERSION = v1.10.0
RELEASE_TOOLS = $(CURDIR)/bin/tools
RELEASE_TAG = $(shell git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null)
# GoReleaser reads no git state at all (no commit, no tag) from a clone with
# no remote: give it the project's URL through git's environment then.
RELEASE_GIT_ENV = $(if $(shell git remote 2>/dev/null),,GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=remote.origin.url GIT_CONFIG_VALUE_0=https://github.com/floodgate-dev/floodgate)

release:
	GOBIN=$(RELEASE_TOOLS) go install github.com/goreleaser/goreleaser/v2@$(GORELEASER_VERSION)
	GOBIN=$(RELEASE_TOOLS) go install github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@$(CYCLONEDX_GOMOD_VERSION)
	$(RELEASE_GIT_ENV) PATH="$(RELEASE_TOOLS):$$PATH" goreleaser release --clean $(if $(RELEASE_TAG),--skip=publish,--snapshot)
	scripts/release-image
