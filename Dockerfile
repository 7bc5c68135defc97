# shardlite in a container (docs/operations.md, "Install and run"). Two stages: build with the
# Rust toolchain, run on a slim Debian as a user without privileges.
#   docker build -t shardlite .
#   docker run -d -p 8080:8080 -v shardlite-data:/data \
#     -v "$PWD/tokens:/run/secrets/shardlite-tokens:ro" shardlite
# Not built on the project's machine (it has no Docker daemon): see operations.md.

FROM rust:1.89-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p shardlite \
    && install -m 0755 target/release/shardlite /usr/local/bin/shardlite

FROM debian:bookworm-slim
# curl for the health check; ca-certificates for `stats --url https://` and `bench --url`.
RUN apt-get update \
    && apt-get install -y --no-install-recommends curl ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin shardlite \
    && install -d -o shardlite -g shardlite -m 0750 /data
COPY --from=build /usr/local/bin/shardlite /usr/local/bin/shardlite
USER shardlite
VOLUME /data
EXPOSE 8080
# Every flag is also a variable. Outside loopback serve needs a token: mount the token file
# there (one `ROLE TOKEN` a line), or set SHARDLITE_AUTH_TOKEN; SIGHUP (docker kill -s HUP)
# re-reads it.
ENV SHARDLITE_DATA=/data \
    SHARDLITE_LISTEN=0.0.0.0:8080 \
    SHARDLITE_AUTH_TOKEN_FILE=/run/secrets/shardlite-tokens \
    SHARDLITE_LOG_FORMAT=json
# Ready: the directory is open and no partition is poisoned (liveness alone is /healthz).
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8080/readyz || exit 1
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/shardlite", "serve"]
