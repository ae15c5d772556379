# svc as a container image (README "The container image and compose file").
#
#   docker build -t svc .
#   docker run -d -p 3000:3000 -v svc-data:/data -e SVC_SECRET=… -e PUBLIC_URL=https://mail.example.com svc
#
# Three stages on one base: `build` compiles the TypeScript with the dev dependencies, `deps` installs the
# production dependencies only (better-sqlite3's native module is built there for this platform), and the
# last stage holds just what runs: Node, tini, node_modules, dist/ and the dashboard's files.

FROM node:22-bookworm-slim AS toolchain
# Python, make and a C++ compiler: better-sqlite3 builds from source where no prebuilt binary fits.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./

FROM toolchain AS build
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY config ./config
COPY src ./src
COPY workers ./workers
RUN npx tsc -p tsconfig.build.json

FROM toolchain AS deps
RUN npm ci --omit=dev --no-audit --no-fund \
 && npm cache clean --force

FROM node:22-bookworm-slim
# tini as PID 1: it passes SIGTERM on to Node (whose handler drains: no new requests, in-flight ones
# finish, the store is closed) and reaps any child that exits.
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data \
 && chown node:node /data
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000 \
    DATA_DIR=/data
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist/src ./dist/src
COPY --from=build /app/dist/workers ./dist/workers
COPY --from=build /app/dist/config ./dist/config
COPY package.json ./
COPY web ./web
COPY scripts/healthcheck.mjs ./scripts/healthcheck.mjs
# The image's files stay root's and read-only to the service; only /data is its own.
USER node
VOLUME ["/data"]
# 3000: HTTP (API, or /healthz, /readyz and /metrics on a process without the api role).
# 2525: returning mail (bounces, complaints) when INBOUND_SMTP_PORT=2525; publish it as port 25.
EXPOSE 3000 2525
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 CMD ["node", "scripts/healthcheck.mjs"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["node", "--enable-source-maps", "dist/src/server.js"]
