# syntax=docker/dockerfile:1
# Container image of leaderd: a multi-stage build (Rust toolchain only in the build stage) and a
# small Debian runtime that runs the binary as a non-root user and works with a read-only root
# filesystem. Usage and the volumes it expects: deploy/README.md ("Container image").
#
#   docker build -t leaderd:0.1.0 .
#   docker run --rm --read-only --tmpfs /run/leaderd:uid=10001,gid=10001 \
#     -v "$PWD/config.yaml:/etc/leaderd/config.yaml:ro" -p 9090:9090 leaderd:0.1.0
#
# Checked by .ci/check-deploy (hadolint, plus the structure rules in deploy/ci/check_misc.py).

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

# --- build stage: compiles the release binary ------------------------------------------------
FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
WORKDIR /src
# Strip symbols from the release binary (smaller image; backtraces are not shown to users anyway).
ENV CARGO_PROFILE_RELEASE_STRIP=symbols \
    CARGO_TERM_COLOR=never
# The context is filtered by .dockerignore (no target/, .git/, deploy/).
COPY . .
# Cache mounts keep the crate registry and target/ between builds; the binary is copied out of
# the cached target/ in the same step, because the cache is not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin leaderd \
    && install -D -m 0755 target/release/leaderd /out/leaderd \
    && /out/leaderd --version

# --- runtime stage: no compiler, no package manager runs, no build tools ----------------------
FROM debian:${DEBIAN_RELEASE}-slim AS runtime
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG DEBIAN_RELEASE
LABEL org.opencontainers.image.title="leaderd" \
      org.opencontainers.image.description="Leader election over a Redis lease: a sidecar daemon that publishes who leads over HTTP, a file and Prometheus metrics" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/debian:${DEBIAN_RELEASE}-slim"

# A fixed numeric user, so Kubernetes can verify runAsNonRoot. /run/leaderd holds the leader
# file (publish.leader_file: /var/run/leaderd/leader.json; /var/run is /run on Debian); with a
# read-only root filesystem mount a tmpfs or an emptyDir there.
RUN groupadd --system --gid 10001 leaderd \
    && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
       --shell /usr/sbin/nologin leaderd \
    && install -d -o 10001 -g 10001 -m 0755 /run/leaderd \
    && install -d -o root -g root -m 0755 /etc/leaderd

# CA bundle for rediss:// (TLS) URLs, taken from the build stage instead of installing packages.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/leaderd /usr/local/bin/leaderd

# The documented config path; `--config PATH` on the command line wins over it.
ENV LEADERD_CONFIG=/etc/leaderd/config.yaml
USER 10001:10001
EXPOSE 9090
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/leaderd"]
CMD ["run"]
