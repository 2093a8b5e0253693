# Build: the release binary, with dependencies cached in their own layer. No database is
# needed to build.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
RUN mkdir -p src migrations \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && cargo build --release --locked \
    && rm -rf src
COPY migrations migrations
COPY openapi.yaml ./
COPY src src
RUN touch src/main.rs src/lib.rs && cargo build --release --locked --bin haggle

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
