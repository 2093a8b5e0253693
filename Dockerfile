# Build: the release binary, with dependencies cached in their own layer. No database is
# needed to build.
FROM rust:1-bookworm AS build
WORKDIR /src
# The workspace's manifests first, each crate with an empty source: building that compiles
# every dependency, and the layer is reused until a manifest or the lock file changes.
COPY Cargo.toml Cargo.lock ./
# Statements are checked against the schema recorded in .sqlx/, so the build needs no database.
COPY .cargo .cargo
COPY crates/domain/Cargo.toml crates/domain/
COPY crates/api/Cargo.toml crates/api/
COPY crates/server/Cargo.toml crates/server/build.rs crates/server/
COPY crates/client/Cargo.toml crates/client/
COPY crates/sim/Cargo.toml crates/sim/
COPY crates/bench/Cargo.toml crates/bench/
COPY crates/chaos/Cargo.toml crates/chaos/
COPY crates/mcp/Cargo.toml crates/mcp/
COPY crates/a2a/Cargo.toml crates/a2a/
RUN mkdir -p src migrations \
    && echo 'fn main() {}' > src/main.rs \
    && for crate in domain api server client sim bench chaos mcp a2a; do mkdir -p crates/$crate/src && touch crates/$crate/src/lib.rs; done \
    && cargo build --release --locked \
    && rm -rf src crates/*/src
COPY migrations migrations
COPY openapi.yaml ./
# The chaos run builds the example HAProxy configuration into the binary.
COPY deploy deploy
COPY .sqlx .sqlx
COPY src src
COPY crates crates
RUN touch src/main.rs crates/*/src/lib.rs && cargo build --release --locked --bin haggle

# Run: a small image, an unprivileged user.
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/haggle --create-home haggle
COPY --from=build /src/target/release/haggle /usr/local/bin/haggle
USER haggle
WORKDIR /var/lib/haggle
ENV HAGGLE_BIND=0.0.0.0:8080
EXPOSE 8080
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s --retries=10 \
    CMD ["haggle", "healthcheck", "--url", "http://127.0.0.1:8080/readyz"]
ENTRYPOINT ["haggle"]
CMD ["serve"]
