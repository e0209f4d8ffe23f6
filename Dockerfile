# sandboxd on Debian 12. Build:  docker build -t sandboxd .
# Run:    docker compose up   (see docker-compose.yml for the privileges bubblewrap needs)
FROM debian:12-slim AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        build-essential cmake pkg-config xxd \
        libmicrohttpd-dev libjansson-dev libsqlite3-dev libjwt-dev libseccomp-dev libssl-dev \
        libcurl4-openssl-dev libssh-dev libarchive-dev libmnl-dev libnftables-dev libhttp-parser-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY cmake cmake
COPY common common
COPY server server
COPY http http
COPY routes routes
COPY auth auth
COPY client client
COPY sandbox sandbox
COPY store store
COPY migrations migrations
COPY openapi openapi
COPY web web
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSANDBOXD_TESTS=OFF && cmake --build build -j"$(nproc)" --target sandboxd

FROM debian:12-slim
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        libmicrohttpd12 libjansson4 libsqlite3-0 libjwt0 libseccomp2 libssl3 libcurl4 libssh-4 libarchive13 \
        libmnl0 libnftables1 libhttp-parser2.9 \
        bubblewrap ca-certificates curl tini python3 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/sandboxd /usr/local/bin/sandboxd
# POST /code runs python3, bash and sh here (node: add nodejs above);
# GET /readyz lists what is installed.
# sandboxd runs as root *inside* the container, so that each tenant gets a
# uid of its own (uid-base + its slot: 10000, 10001, ...) and its commands
# drop to it before bubblewrap starts. Run the container in a user
# namespace that maps it to an unprivileged host range (Docker's
# userns-remap, or rootless Docker): container root is then an ordinary
# host uid, and tenant N is host uid <range start> + 10000 + N. uid-base
# 10000 keeps every tenant inside the 65536 ids such a namespace maps
# (65534 is nobody, the backend's start probe). See docker-compose.yml for
# the capabilities and security options, and docs/operations.md, Deployment.
VOLUME /var/lib/sandboxd
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s \
    CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
# tini is PID 1: it reaps what sandboxes leave to PID 1 (bwrap's inner
# process when a command's group is killed) and forwards SIGTERM.
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/sandboxd"]
CMD ["serve", "--listen", "0.0.0.0:8080", "--data-dir", "/var/lib/sandboxd", "--set", "uid-base=10000"]
