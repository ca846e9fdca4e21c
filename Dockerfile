# syntax=docker/dockerfile:1
# Container image of leaderd: a multi-stage build (the Rust toolchain only in the build stage)
# and a distroless-style final stage built FROM scratch: the binary, the shared libraries it
# links (glibc, libgcc_s), the CA bundle and a passwd entry for uid 10001. No shell, no package
# manager. Runs as non-root on a read-only root filesystem. Usage: deploy/README.md.
#
#   docker build -t leaderd:0.1.0 .
#   docker run --rm --read-only --tmpfs /run/leaderd:uid=10001,gid=10001 \
#     -v "$PWD/config.yaml:/etc/leaderd/config.yaml:ro" -p 9090:9090 leaderd:0.1.0
#
# Linted by .ci/check-deploy (hadolint, deploy/ci/check_misc.py); built, run and measured by
# .ci/check-image.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

# --- build stage: compiles the release binary and assembles the final root filesystem ---------
FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
WORKDIR /src
# Strip symbols from the release binary (smaller image; backtraces are not shown to users anyway).
ENV CARGO_PROFILE_RELEASE_STRIP=symbols \
    CARGO_TERM_COLOR=never
# Only what `cargo build` reads, so an edit elsewhere (docs, tests) does not rebuild.
COPY Cargo.toml Cargo.lock ./
COPY src/ src/
COPY lua/ lua/
COPY benches/ benches/
# Cache mounts keep the crate registry and target/ between builds (incremental release builds);
# the binary is copied out of the cached target/ in the same step, as the cache is not in the
# image. Then /out/rootfs gets the shared libraries the binary links (as ldd resolves them,
# the dynamic loader at its PT_INTERP path), the CA bundle for rediss://, passwd/group with the
# user 10001, an nsswitch.conf that reads /etc/hosts before DNS, and the dpkg records and
# copyright files of the Debian packages those libraries come from (for scanners and licenses).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin leaderd \
    && install -D -m 0755 target/release/leaderd /out/rootfs/usr/local/bin/leaderd \
    && /out/rootfs/usr/local/bin/leaderd --version \
    && ldd /out/rootfs/usr/local/bin/leaderd >/tmp/ldd \
    && grep -o '/[^ ]*' /tmp/ldd >/tmp/libs \
    && while read -r lib; do \
         cp --parents -L "$lib" /out/rootfs/ || exit 1; \
         dpkg -S "$lib" >>/tmp/owners 2>/dev/null || dpkg -S "$(realpath "$lib")" >>/tmp/owners || exit 1; \
       done </tmp/libs \
    && cut -d: -f1 /tmp/owners >/tmp/pkgs \
    && echo ca-certificates >>/tmp/pkgs \
    && install -D -m 0644 /etc/ssl/certs/ca-certificates.crt /out/rootfs/etc/ssl/certs/ca-certificates.crt \
    && install -d -m 0755 /out/rootfs/var/lib/dpkg/status.d /out/rootfs/etc/leaderd /out/rootfs/run \
    && sort -u -o /tmp/pkgs /tmp/pkgs \
    && while read -r pkg; do \
         dpkg-query -s "$pkg" >"/out/rootfs/var/lib/dpkg/status.d/$pkg" \
         && install -D -m 0644 "/usr/share/doc/$pkg/copyright" "/out/rootfs/usr/share/doc/$pkg/copyright" \
         || exit 1; \
       done </tmp/pkgs \
    && printf 'root:x:0:0:root:/root:/sbin/nologin\nleaderd:x:10001:10001:leaderd:/nonexistent:/sbin/nologin\n' \
       >/out/rootfs/etc/passwd \
    && printf 'root:x:0:\nleaderd:x:10001:\n' >/out/rootfs/etc/group \
    && printf 'passwd: files\ngroup: files\nhosts: files dns\n' >/out/rootfs/etc/nsswitch.conf \
    && ln -s ../run /out/rootfs/var/run \
    && install -d -m 0755 /out/run-leaderd

# --- final stage: distroless-style, nothing but what leaderd needs at run time ----------------
FROM scratch AS runtime
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="leaderd" \
      org.opencontainers.image.description="Leader election over a Redis lease: a sidecar daemon that publishes who leads over HTTP, a file and Prometheus metrics" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/rootfs/ /
# /run/leaderd holds the leader file (publish.leader_file: /var/run/leaderd/leader.json, and
# /var/run is /run). With a read-only root filesystem mount a tmpfs or an emptyDir there.
COPY --from=build --chown=10001:10001 /out/run-leaderd /run/leaderd
# The documented config path; `--config PATH` on the command line wins over it.
ENV LEADERD_CONFIG=/etc/leaderd/config.yaml
# A fixed numeric user, so Kubernetes can verify runAsNonRoot.
USER 10001:10001
EXPOSE 9090
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/leaderd"]
CMD ["run"]
