# syntax=docker/dockerfile:1
#
# capper's container image: both binaries (/capper, /segment-builder), static
# (CGO off), on distroless as the non-root user. Needs BuildKit (the default
# builder since Docker 23).
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) --build-arg REVISION=$(git rev-parse HEAD) -t capper .
#   docker run --rm capper version
#
# The worker reads its config from /etc/capper/capper.yaml (the Helm chart
# mounts it there): docker run -v $PWD/configs:/etc/capper:ro capper

ARG GO_VERSION=1.26

# The build runs on the builder's own platform and cross-compiles, which CGO
# off makes trivial (docker buildx build --platform linux/amd64,linux/arm64).
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
# The VCS revision (.git is not in the build context): git rev-parse HEAD.
ARG REVISION=unknown
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.revision=${REVISION}" -o /out/ ./cmd/capper ./cmd/segment-builder

# static-debian12 has CA certificates and tzdata, and nothing to run but our
# binaries; :nonroot runs as uid/gid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="capper" \
      org.opencontainers.image.description="Frequency caps for marketing messages" \
      org.opencontainers.image.source="https://github.com/capper-dev/capper" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/capper /out/segment-builder /
USER nonroot:nonroot
# /metrics, /healthz, /readyz (http.address).
EXPOSE 9090
ENTRYPOINT ["/capper"]
CMD ["run", "--config", "/etc/capper/capper.yaml"]
