.PHONY: stack test demo screenshot bench chaos attack build down fuzz

# Fuzzing runs for a number of executions, not a time: Go 1.26's coordinator
# can report its own -fuzztime deadline as a failure ("context deadline
# exceeded", no input written; go.dev/issue/75804, fixed in Go 1.27). The
# minimiser gets a bounded time so one slow input cannot hold a run.
FUZZ_SHORT = -fuzztime=300000x -fuzzminimizetime=10s
FUZZ_LONG = -fuzztime=3000000x -fuzzminimizetime=30s

stack:
	scripts/stack up

test:
	scripts/stack up && scripts/stack up --cluster && scripts/stack up --secure && eval "$$(scripts/stack env)" && go test -race -count=1 -timeout 60m ./...
	go test ./event -run='^$$' -fuzz='^FuzzDecode$$' $(FUZZ_SHORT)
	go test ./event -run='^$$' -fuzz='^FuzzDecodeEncodedMatchesJSON$$' $(FUZZ_SHORT)
	go test ./timespan -run='^$$' -fuzz='^FuzzParseDuration$$' $(FUZZ_SHORT)
	go test ./limiter -run='^$$' -fuzz='^FuzzParseQuery$$' $(FUZZ_SHORT)
	go test ./limiter -run='^$$' -fuzz='^FuzzRLSRequest$$' $(FUZZ_SHORT)
	go test ./limiter -run='^$$' -fuzz='^FuzzConnectRequest$$' $(FUZZ_SHORT)

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

build:
	go build -ldflags="-X main.commit=$$(git rev-parse HEAD 2>/dev/null) -X main.date=$$(git log -1 --format=%cI 2>/dev/null) -X main.version=$$(git describe --tags --always 2>/dev/null)" -o bin/floodgate ./cmd/floodgate

down:
	scripts/stack down

fuzz:
	go test ./event -run='^$$' -fuzz='^FuzzDecode$$' $(FUZZ_LONG)
	go test ./event -run='^$$' -fuzz='^FuzzDecodeEncodedMatchesJSON$$' $(FUZZ_LONG)
	go test ./timespan -run='^$$' -fuzz='^FuzzParseDuration$$' $(FUZZ_LONG)
	go test ./limiter -run='^$$' -fuzz='^FuzzParseQuery$$' $(FUZZ_LONG)
	go test ./limiter -run='^$$' -fuzz='^FuzzRLSRequest$$' $(FUZZ_LONG)
	go test ./limiter -run='^$$' -fuzz='^FuzzConnectRequest$$' $(FUZZ_LONG)
