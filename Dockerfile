# syntax=docker/dockerfile:1
#
# xds-gateway image: build with cargo, run as a non-root user on Debian slim.
#
#   docker build -t xds-gateway .
#   docker run --rm -p 127.0.0.1:8080:8080 -p 127.0.0.1:9901:9901 xds-gateway --allow-insecure-listen --allow-insecure-admin
#
# Inside a container the gateway must listen on 0.0.0.0 to be reachable from
# outside it: the image sets XDS_GATEWAY_LISTEN / XDS_GATEWAY_ADMIN to the
# binary's default ports on 0.0.0.0 (docker-compose.yml also passes them as
# flags). A REST listener off loopback refuses to start without TLS
# (--tls-cert/--tls-key, mounted) or an auth policy (--auth-policy), unless
# --allow-insecure-listen says the network in front is trusted (the demo
# line above: published on the host's loopback only). Likewise the admin
# listener's details (/metrics, /debug/*, CSDS) answer 401 off loopback
# without an admin credential unless --allow-insecure-admin; /healthz and
# /readyz stay open for probes. The image sets neither flag: an unprotected
# deployment must be a visible choice. Without
# arguments it serves the demo snapshot compiled into the binary;
# `--snapshot DIR` (mounted) or `--upstream grpc://HOST:PORT` as usual.
# tests/docker_files.rs checks this file against the binary's defaults.

FROM rust:1-bookworm AS builder
WORKDIR /src
# The whole build context (see .dockerignore): the workspace's crates/,
# build.rs embeds examples/demo, and Cargo.toml names the bench targets.
# crates/xds/build.rs runs `cargo metadata`, which fetches the locked crates
# carrying Envoy's .proto files (no protoc), and compiles them with proto/.
COPY . .
# The image gets a stripped binary (about 19 MB instead of 120 MB): no symbol
# table, no line tables. The release profile keeps them (benchmarks and perf
# want them), so the strip is done here; the debug file, matching the image's
# binary (its build id, and a .gnu_debuglink naming the file), stays in this
# stage: `docker build --target builder` and copy /out/xds-gateway.debug out.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin xds-gateway \
 && install -d /out \
 && objcopy --only-keep-debug target/release/xds-gateway /out/xds-gateway.debug \
 && objcopy --strip-all --add-gnu-debuglink=/out/xds-gateway.debug \
      target/release/xds-gateway /out/xds-gateway \
 && chmod 0755 /out/xds-gateway

FROM debian:bookworm-slim
# CA roots for grpcs:// upstreams.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 xds \
 && useradd --system --uid 10001 --gid xds --no-create-home --shell /usr/sbin/nologin xds
COPY --from=builder /out/xds-gateway /usr/local/bin/xds-gateway
ENV XDS_GATEWAY_LISTEN=0.0.0.0:8080 \
    XDS_GATEWAY_ADMIN=0.0.0.0:9901
# REST xDS, then admin (/healthz, /readyz, /metrics).
EXPOSE 8080 9901
USER 10001:10001
ENTRYPOINT ["xds-gateway"]
