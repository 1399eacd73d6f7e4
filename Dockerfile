# tether's image: built in a Rust image, run from a distroless one as a non-root user.
#   make image   (docker, podman or buildah)
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
# Dependencies first, so that a change to tether's code does not rebuild them.
COPY Cargo.toml Cargo.lock ./
COPY e2e/Cargo.toml e2e/Cargo.toml
RUN mkdir -p src benches e2e/src \
    && echo 'fn main() {}' > src/main.rs && touch src/lib.rs e2e/src/lib.rs \
    && echo 'fn main() {}' > benches/schedule_cycle.rs \
    && cargo build --release --locked --bin tether \
    && rm -rf src benches e2e/src
# The commit `tether version` reports (no .git in the build context): `make image` passes it.
ARG TETHER_COMMIT=unknown
ENV TETHER_COMMIT=$TETHER_COMMIT
COPY build.rs build.rs
COPY src src
COPY benches benches
COPY e2e/src e2e/src
RUN touch src/main.rs src/lib.rs && cargo build --release --locked --bin tether

# glibc and CA certificates, nothing else: no shell, no package manager.
FROM gcr.io/distroless/cc-debian12:nonroot
ARG TETHER_COMMIT=unknown
LABEL org.opencontainers.image.title="tether" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.revision="$TETHER_COMMIT"
COPY --from=build /src/target/release/tether /usr/local/bin/tether
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/tether"]
CMD ["run"]
