# caplv-manager image. Build from the repository root:
#   docker build -t quay.io/caplv/caplv-manager:0.1.0 .     (or: podman build, buildah bud)
# The tag is the chart's default image: values.yaml image.repository, and the chart's appVersion.
# scripts/test-image.sh builds this file as written and runs the result as OpenShift does.
#
# Stage 1 compiles against libvirt's headers; stage 2 installs the libvirt client library (the
# `virt` crate links libvirt.so.0) and gathers what the binary loads; the image is only that
# (about 94 MB) and runs as a non-root user. OpenShift's restricted-v2 SCC replaces the UID with
# one from the namespace's range, which works too: the binary needs no home directory and
# writes only to /tmp (an emptyDir in the Helm chart).

FROM docker.io/library/rust:1.95-slim-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends pkg-config libvirt-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Without the default `sandbox` feature: the shipped binary carries no test stand-ins.
RUN cargo build --profile dist --locked --bin caplv-manager --no-default-features --features caplv,ignition,fivespot

# The runtime's files: the binary, the shared libraries it loads (libvirt's client library, which
# speaks to hosts through the manager's SSH tunnel, and what that needs) with the loader,
# libvirt's data, CA certificates and a passwd entry for the default user. Nothing else: no
# shell, no package manager.
FROM docker.io/library/debian:bookworm-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends libvirt0 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/dist/caplv-manager /usr/local/bin/caplv-manager
RUN set -eu; bin=/usr/local/bin/caplv-manager; root=/rootfs; \
    mkdir -p "$root/tmp" "$root/etc/ssl/certs" "$root/usr/share"; \
    chmod 1777 "$root/tmp"; \
    for file in "$bin" $(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do \
      cp -L --parents "$file" "$root/"; \
    done; \
    cp -a /usr/share/libvirt "$root/usr/share/"; \
    cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"; \
    echo 'nonroot:x:65532:65532:nonroot:/tmp:/sbin/nologin' >"$root/etc/passwd"; \
    echo 'nonroot:x:65532:' >"$root/etc/group"

FROM scratch
COPY --from=runtime /rootfs /
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/caplv-manager"]
CMD ["run"]
