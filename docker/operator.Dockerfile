# syntax=docker/dockerfile:1
# The switchboard-operator image.
#
#   docker build -f docker/operator.Dockerfile -t switchboard-operator:0.1.0 .
#
# Build context: the repository root (docker/operator.Dockerfile.dockerignore trims it).
# Not built on the development machine (no container runtime there); kept deliberately plain.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p switchboard-operator --bin switchboard-operator \
    && install -D -m 0755 target/release/switchboard-operator /out/switchboard-operator

# glibc + libgcc only, no shell, runs as uid/gid 65532 ("nonroot").
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/switchboard-operator /usr/local/bin/switchboard-operator
USER 65532:65532
# /healthz, /readyz, /metrics.
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/switchboard-operator"]
CMD ["run"]
