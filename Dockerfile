# caplv-manager image. Build from the repository root:
#   docker build -t quay.io/caplv/caplv-manager:0.1.0 .     (or: podman build ...)
#
# Stage 1 compiles against libvirt's headers; stage 2 carries only the libvirt client library
# (the `virt` crate links libvirt.so.0, whose remote driver speaks to hosts through the
# manager's SSH tunnel) and CA certificates, and runs as a non-root user. OpenShift's
# restricted-v2 SCC replaces the UID with one from the namespace's range, which works too: the
# binary needs no home directory and writes only to /tmp (an emptyDir in the Helm chart).

FROM docker.io/library/rust:1.95-slim-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends pkg-config libvirt-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Without the default `sandbox` feature: the shipped binary carries no test stand-ins.
RUN cargo build --profile dist --locked --bin caplv-manager --no-default-features --features caplv,ignition,fivespot

FROM docker.io/library/debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libvirt0 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/dist/caplv-manager /usr/local/bin/caplv-manager
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/caplv-manager"]
CMD ["run"]
