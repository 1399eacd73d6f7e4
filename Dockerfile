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
COPY src src
COPY benches benches
COPY e2e/src e2e/src
RUN touch src/main.rs src/lib.rs && cargo build --release --locked --bin tether

# glibc and CA certificates, nothing else: no shell, no package manager.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/tether /usr/local/bin/tether
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/tether"]
CMD ["run"]
