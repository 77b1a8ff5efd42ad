# The oz0 image: `oz0 worker` by default (one node), or any other oz0 command given as arguments. With
# the entrypoint `node dist/examples/<name>.js` it runs an example server instead; docker-compose.yml
# runs it both ways (the `node` and `search` services).
#
# Both stages use the same pinned Node 20 image, so the native modules installed in the build stage
# (the Temporal core bridge, @swc/core's binding, better-sqlite3) match the runtime's glibc and architecture.

FROM node:20.20.2-bookworm-slim AS build
WORKDIR /app

# better-sqlite3 (the plugin kit's key store) is compiled here when no prebuilt binary fits.
RUN apt-get update \
  && apt-get install -y --no-install-recommends python3 make g++ \
  && rm -rf /var/lib/apt/lists/*

# Dependencies first, in a layer of their own that stays cached while only sources change.
# --ignore-scripts: npm ci would otherwise run this package's `prepare` (npm run build) before the
# sources are here. Of the dependencies' own install scripts only better-sqlite3's is needed, and run
# next (it fetches or compiles its native addon): @swc/core's only checks its native binding
# (installed as an optional dependency) and protobufjs's only warns.
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
RUN npm rebuild better-sqlite3

# .dockerignore keeps node_modules, dist, .tools, .oz0, .git and test/ out of this copy.
COPY . .
# Without .git the build cannot read its commit: `docker build --build-arg OZ0_COMMIT=$(git rev-parse HEAD) .` names
# it, and a node says it with its release (common/release.ts); left empty, the node says its commit is unknown.
ARG OZ0_COMMIT=
RUN npm run build

# The native forwarder a sandbox with a network of its own runs before its program (docs/isolation.md#network):
# built here with Go's own pinned image, into .tools/forwarder/<digest of native/forwarder>/ with its sha256, which
# a node checks and runs without Go of its own (the Node.js forwarder costs each harness's start 40 ms and more).
COPY --from=golang:1.26.8-bookworm /usr/local/go /usr/local/go
RUN OZ0_GO=/usr/local/go/bin/go npm run forwarder:build

# Runtime dependencies only. The Temporal core bridge ships prebuilt binaries for five platforms and
# its Rust sources: keep the one this image runs on (releases/<uname -m>-unknown-linux-gnu).
RUN npm prune --omit=dev --no-audit --no-fund \
  && find node_modules/@temporalio/core-bridge/releases -mindepth 1 -maxdepth 1 \
    ! -name "$(uname -m)-unknown-linux-gnu" -exec rm -rf {} + \
  && rm -rf node_modules/@temporalio/core-bridge/sdk-core

FROM node:20.20.2-bookworm-slim AS runtime
ENV NODE_ENV=production
# A node's native memory (issue 36.3): glibc gives each thread that allocates an arena of its own, up to 8 a core, and
# a node's threads (the Temporal core's, its workflow thread, V8's, libuv's) hold more in them than two arenas do, most
# when many calls end at once. Measured at 500 running calls: 7-12 MiB less idle, 19 MiB less at the peak, no change
# in a call's time (bench/HISTORY.md). The processes a node starts get only the environment their config names (SPEC
# I5, H2), so this stays the node's.
ENV MALLOC_ARENA_MAX=2
WORKDIR /app

# SPEC I: every sandboxed server and harness runs in a bubblewrap sandbox. The node runs as the unprivileged `node`
# user, so bwrap makes a user namespace: docker-compose.yml gives the container the three security options that
# allow it (docs/deploy.md says why each). Each sandbox's system-call filter is compiled by libseccomp (already here:
# apt depends on it; named so it stays), which the node calls through koffi, whose prebuilt binding comes in
# node_modules. util-linux (prlimit, setpriv, taskset: each sandbox's own limits) is in the base image.
RUN apt-get update \
  && apt-get install -y --no-install-recommends bubblewrap libseccomp2 \
  && rm -rf /var/lib/apt/lists/*

# Only what a node runs: the compiled code, its runtime dependencies, the CLI wrapper and the example
# job specs. Owned by root, so the node user can read but not change them.
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/bin ./bin
COPY --from=build /app/examples/jobs ./examples/jobs
COPY --from=build /app/native ./native
COPY --from=build /app/.tools/forwarder ./.tools/forwarder

# node.stateDir of deploy/oz0.cluster.json: sandbox folders and the example servers' state. The config
# itself is mounted read-only, so nothing may be written beside it. /var/lib/oz0/ledger is where
# docker-compose.yml mounts the volume every node shares for the ledger's key store, /var/lib/oz0/keys the one
# for the payload keys (payloads.seal.folder, D4: the node's alone, 0700); a fresh volume takes its owner and mode
# from here.
RUN mkdir -p /var/lib/oz0/ledger /var/lib/oz0/keys && chown node:node /var/lib/oz0 /var/lib/oz0/ledger /var/lib/oz0/keys \
  && chmod 0700 /var/lib/oz0/keys

# The image's own unprivileged user (uid 1000).
USER node

# No HEALTHCHECK: a node serves no port of its own, it only polls Temporal. Whether it is alive shows
# in Temporal (`temporal task-queue describe --task-queue oz0` lists its pollers), and a node that
# cannot reach Temporal at start exits 1, which the compose file's restart policy answers.
ENTRYPOINT ["node", "dist/client/cli/index.js"]
CMD ["worker"]
