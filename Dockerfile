# The Streaming Hub image: a release build of `streaming-hub`, run as uid 65532 from a root
# filesystem that holds the binary, the libraries it links, the CA bundle and nothing else (no
# shell, no package manager), so it runs with a read-only root filesystem.
#
#   docker build -t streaming-hub .
#   docker run --read-only -p 8080:8080 -v hub-data:/data streaming-hub            # embedded store
#   docker run --read-only streaming-hub migrate                                   # the migration Job
#
# Probes: GET /healthz (liveness) and GET /readyz (readiness; 503 while draining). scripts/image
# builds and runs this file here.

ARG RUST_IMAGE=rust:1-bookworm
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${RUST_IMAGE} AS build
ARG REVISION=unknown
ARG SOURCE_DATE_EPOCH
# librdkafka (bundled) builds with make and links OpenSSL for TLS and SASL/SCRAM to the brokers.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends make libssl-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The registry and the target directory are cache mounts: a rebuild after a change compiles what
# changed, not every dependency again.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    STREAMING_HUB_REVISION="${REVISION}" STREAMING_HUB_BUILD_EPOCH="${SOURCE_DATE_EPOCH}" \
    cargo build --release --locked -p streaming-hub --bin streaming-hub \
 && cp target/release/streaming-hub /usr/local/bin/streaming-hub \
 && strip --strip-debug /usr/local/bin/streaming-hub

# The runtime's root filesystem, assembled from the base image: the binary and exactly what it
# links (from `ldd`), CA certificates, and the nonroot user.
FROM ${BASE_IMAGE} AS rootfs
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /usr/local/bin/streaming-hub /rootfs/usr/local/bin/streaming-hub
RUN set -eu; \
    for lib in $(ldd /rootfs/usr/local/bin/streaming-hub | grep -oE '/[^ ]+' | sort -u); do \
      cp -L --parents "$lib" /rootfs/; \
    done; \
    mkdir -p /rootfs/etc/ssl/certs /rootfs/data /rootfs/tmp /rootfs/home/nonroot; \
    cp -L /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/; \
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > /rootfs/etc/passwd; \
    printf 'root:x:0:\nnonroot:x:65532:\n' > /rootfs/etc/group; \
    chown 65532:65532 /rootfs/data /rootfs/home/nonroot; \
    chmod 1777 /rootfs/tmp

FROM scratch
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED
LABEL org.opencontainers.image.title="streaming-hub" \
      org.opencontainers.image.description="Event delivery hub: CloudEvents in, webhooks and queues out" \
      org.opencontainers.image.source="https://github.com/streaming-hub/streaming-hub" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
COPY --from=rootfs /rootfs/ /
# MIMALLOC_PURGE_DELAY: the allocator gives freed memory back after 100 ms rather than its 1 s,
# a quarter less peak memory under Kafka ingest for no measured CPU (docs/OPERATIONS.md, Memory).
ENV PATH=/usr/local/bin \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    MIMALLOC_PURGE_DELAY=100 \
    STREAMING_HUB_HTTP_LISTEN_ADDR=:8080 \
    STREAMING_HUB_SQLITE_PATH=/data/streaming-hub.db
WORKDIR /data
USER 65532:65532
EXPOSE 8080
VOLUME ["/data"]
ENTRYPOINT ["streaming-hub"]
CMD ["serve"]
