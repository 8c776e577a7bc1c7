# syntax=docker/dockerfile:1
# Multi-stage build of the single floodgate binary; the runtime image is
# distroless, static and non-root.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# The build context has no .git, so the version comes in as build args
# (floodgate version, floodgate_build_info).
ARG VERSION="" COMMIT="" DATE=""
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath \
    -ldflags="-s -w -X main.version=${VERSION} -X main.commit=${COMMIT} -X main.date=${DATE}" \
    -o /out/floodgate ./cmd/floodgate

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/floodgate /usr/local/bin/floodgate
COPY examples/rules.yaml /etc/floodgate/rules.yaml
ENV FLOODGATE_RULES=/etc/floodgate/rules.yaml \
    FLOODGATE_LOG_FORMAT=json
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/floodgate"]
