# syntax=docker/dockerfile:1
# The switchboard node image: `switchboard serve` and the other subcommands.
#
#   docker build -f docker/node.Dockerfile -t switchboard:0.1.0 .
#
# Build context: the repository root (docker/node.Dockerfile.dockerignore trims it).
# Not built on the development machine (no container runtime there); kept deliberately plain.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p switchboard-node --bin switchboard \
    && install -D -m 0755 target/release/switchboard /out/switchboard \
    && install -d -o 65532 -g 65532 /out/data

# glibc + libgcc only, no shell, runs as uid/gid 65532 ("nonroot").
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/switchboard /usr/local/bin/switchboard
COPY --from=build --chown=65532:65532 /out/data /var/lib/switchboard
USER 65532:65532
ENV SWITCHBOARD_DATA_DIR=/var/lib/switchboard
# MCP endpoint, peer port (Raft + admin API), metrics/health.
EXPOSE 8080 7070 9090
ENTRYPOINT ["/usr/local/bin/switchboard"]
CMD ["serve"]
