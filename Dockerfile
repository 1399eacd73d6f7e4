# tether's image, FROM scratch: the release binary, the shared libraries it links, CA
# certificates and a passwd naming user 65532, nothing else (no shell, no package manager).
# scripts/image.sh (`make image`) builds the binary and assembles that filesystem in
# target/image/rootfs, then builds this file with target/image as the context: no base image is
# pulled, so the build needs no registry.
FROM scratch
ARG TETHER_COMMIT=unknown
ARG TETHER_VERSION=unknown
LABEL org.opencontainers.image.title="tether" \
      org.opencontainers.image.description="A Kubernetes scheduler and operator: kube-scheduler's plugins, live profiles, sticky placement" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="$TETHER_VERSION" \
      org.opencontainers.image.revision="$TETHER_COMMIT"
COPY rootfs/ /
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/tether"]
CMD ["run"]
