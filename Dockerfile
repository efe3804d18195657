# syntax=docker/dockerfile:1
# planwright: a release build on the Rust image, run on slim Debian with git and
# bubblewrap as a non-root user. `--build-arg WITH_AGENTS=1` adds Node and the Claude Code
# and Codex executors.
#
#   docker build -t planwright .
#   docker build -t planwright:agents --build-arg WITH_AGENTS=1 .
#   docker run -p 3000:3000 -v planwright-data:/data --env-file planwright.env \
#     --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
#     --security-opt systempaths=unconfined planwright
#
# The sandbox (bubblewrap) needs user namespaces, which Docker's default seccomp and
# AppArmor profiles forbid, and a /proc of its own, which the kernel refuses while Docker
# covers parts of the container's: hence the three --security-opt (see
# docs/operating/deploying.md; `planwright doctor` names whichever is missing).

ARG RUST_VERSION=1.94
ARG DEBIAN_RELEASE=trixie
# Current Claude Code needs Node 22 or newer.
ARG NODE_VERSION=24
ARG WITH_AGENTS=0

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS builder
# git2 builds libgit2 against OpenSSL, found through pkg-config.
RUN apt-get update \
    && apt-get install -y --no-install-recommends pkg-config libssl-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin planwright \
    && cp target/release/planwright /usr/local/bin/planwright

FROM node:${NODE_VERSION}-${DEBIAN_RELEASE}-slim AS agents
ARG CLAUDE_CODE_VERSION=2.1.332
ARG CODEX_VERSION=0.171.0
RUN npm install --global \
        "@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}" \
        "@openai/codex@${CODEX_VERSION}" \
    && npm cache clean --force

FROM debian:${DEBIAN_RELEASE}-slim AS runtime-0
# curl is for the health check; git for mirrors and pushes; bubblewrap is the sandbox;
# bash-static is the shell Claude Code's Bash tool gets in images without bash.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl git bubblewrap bash-static \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --home-dir /data --shell /usr/sbin/nologin planwright \
    && mkdir -p /data \
    && chown planwright:planwright /data
COPY --from=builder /usr/local/bin/planwright /usr/local/bin/planwright
ENV PLANWRIGHT_DATA_DIR=/data \
    PLANWRIGHT_LISTEN=0.0.0.0:3000 \
    PLANWRIGHT_LOG_FORMAT=json
VOLUME ["/data"]
WORKDIR /data
USER 10001:10001
EXPOSE 3000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:3000/healthz"]
ENTRYPOINT ["planwright"]
CMD ["serve"]

# Executors run inside the sandbox, whose PATH is /usr/local/bin:/usr/bin:/bin: Node and
# the agents go to /usr/local, where they find each other.
FROM runtime-0 AS runtime-1
COPY --from=agents /usr/local/bin/ /usr/local/bin/
COPY --from=agents /usr/local/lib/node_modules/ /usr/local/lib/node_modules/

# A stage of this file, chosen by the build argument.
# hadolint ignore=DL3006
FROM runtime-${WITH_AGENTS}
