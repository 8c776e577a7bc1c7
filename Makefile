.PHONY: stack test demo screenshot bench chaos attack build down fuzz

stack:
	scripts/stack up

test:
	scripts/stack up && scripts/stack up --cluster && scripts/stack up --secure && eval "$$(scripts/stack env)" && go test -race -count=1 -timeout 60m ./...
	go test ./event -run='^$$' -fuzz='^FuzzDecode$$' -fuzztime=15s
	go test ./event -run='^$$' -fuzz='^FuzzDecodeEncodedMatchesJSON$$' -fuzztime=15s
	go test ./timespan -run='^$$' -fuzz='^FuzzParseDuration$$' -fuzztime=15s

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
	go test ./event -run='^$$' -fuzz='^FuzzDecode$$' -fuzztime=30s
	go test ./event -run='^$$' -fuzz='^FuzzDecodeEncodedMatchesJSON$$' -fuzztime=30s
	go test ./timespan -run='^$$' -fuzz='^FuzzParseDuration$$' -fuzztime=30s
