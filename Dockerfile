# tether's image, built inside a Rust builder (for machines that reach a registry):
#
#   docker build -t tether:dev .
#   docker buildx build --platform linux/amd64,linux/arm64 -t REGISTRY/tether:TAG --push .
#
# The result is what `make image` (scripts/image.sh) builds without any registry: FROM scratch,
# a static musl binary, CA certificates and user 65532. The builder runs on each target platform
# (arm64 under emulation when the host is amd64), so no cross C toolchain is needed.
# TETHER_COMMIT names the commit in `tether version` (the .git directory is not sent).
ARG RUST_VERSION=1.95
FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
ARG PROFILE=dist
ARG TETHER_COMMIT=unknown
RUN set -eu; \
    target="$(uname -m)-unknown-linux-musl"; \
    rustup target add "$target"; \
    export CC_x86_64_unknown_linux_musl=musl-gcc CC_aarch64_unknown_linux_musl=musl-gcc; \
    TETHER_COMMIT="$TETHER_COMMIT" RUSTFLAGS="-C target-feature=+crt-static --remap-path-prefix=/src=/tether" \
      cargo build --profile "$PROFILE" --locked --target "$target" --bin tether; \
    mkdir -p /rootfs/usr/local/bin /rootfs/etc/ssl/certs /rootfs/tmp /rootfs/home/nonroot; \
    cp "target/$target/$PROFILE/tether" /rootfs/usr/local/bin/tether; \
    cp /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/; \
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >/rootfs/etc/passwd; \
    printf 'root:x:0:\nnonroot:x:65532:\n' >/rootfs/etc/group; \
    chmod 1777 /rootfs/tmp

FROM scratch
ARG TETHER_COMMIT=unknown
ARG TETHER_VERSION=0.1.0
LABEL org.opencontainers.image.title="tether" \
      org.opencontainers.image.description="A Kubernetes scheduler and operator: kube-scheduler's plugins, live profiles, sticky placement" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="$TETHER_VERSION" \
      org.opencontainers.image.revision="$TETHER_COMMIT"
COPY --from=build /rootfs/ /
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/tether"]
CMD ["run"]
