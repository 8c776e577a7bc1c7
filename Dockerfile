# syntax=docker/dockerfile:1
# Multi-stage build of the single floodgate binary; the runtime image is
# distroless, static and non-root. Both base images are pinned (a release
# may pin them by digest: --build-arg GO_IMAGE=golang@sha256:...) and
# deploy/compose_test.go checks they are.
ARG GO_IMAGE=golang:1.26.8-bookworm
ARG BASE_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# The build context has no .git, so the version comes in as build args
# (floodgate version, floodgate_build_info). Cross-compiled for the
# target's platform: no emulation, whatever builds it.
ARG VERSION="" COMMIT="" DATE="" TARGETOS TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOWORK=off GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath \
    -ldflags="-s -w -X github.com/floodgate-dev/floodgate/internal/version.version=${VERSION} -X github.com/floodgate-dev/floodgate/internal/version.commit=${COMMIT} -X github.com/floodgate-dev/floodgate/internal/version.date=${DATE}" \
    -o /out/floodgate ./cmd/floodgate

# What every image of floodgate holds but the binary: the example rules,
# the settings, the non-root user and the OCI labels (`make release` gives
# VERSION, COMMIT and DATE; docs/operations.md, "Releases").
FROM ${BASE_IMAGE} AS runtime
ARG VERSION="" COMMIT="" DATE="" BASE_IMAGE
LABEL org.opencontainers.image.title="floodgate" \
      org.opencontainers.image.description="Rate limiting and access analytics on Kafka, Redis and PostgreSQL" \
      org.opencontainers.image.source="https://github.com/floodgate-dev/floodgate" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.created="${DATE}" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
COPY examples/rules.yaml /etc/floodgate/rules.yaml
ENV FLOODGATE_RULES=/etc/floodgate/rules.yaml \
    FLOODGATE_LOG_FORMAT=json
# Numeric: the kubelet checks runAsNonRoot only against a numeric user
# (distroless's nonroot is 65532).
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/floodgate"]

# A release's image: the binary `make release` built and checksummed for
# the platform (dist/image/<os>_<arch>/floodgate), so the image runs the
# same bytes as the release's archives. `--target release`.
FROM runtime AS release
ARG TARGETOS TARGETARCH
COPY dist/image/${TARGETOS}_${TARGETARCH}/floodgate /usr/local/bin/floodgate

# The default target, as docker compose builds it: from source.
FROM runtime
COPY --from=build /out/floodgate /usr/local/bin/floodgate
