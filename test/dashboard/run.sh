#!/usr/bin/env bash
# run.sh runs the Cycles operator dashboard's own Playwright suite
# against cyclesd: the dashboard is built from its source, served with /v1/*
# forwarded to cyclesd's HTTP listener (test/dashboard/proxy.mjs), and its
# tests/e2e specs run in Debian's chromium. Nothing of cyclesd is changed for it.
#
#   test/dashboard/run.sh <dashboard checkout> [playwright args...]
#
# Needs node >= 20, npm and Debian's chromium (apt-get install chromium). It
# starts its own cyclesd in dev mode (embedded store) on free ports unless
# CYCLESD_HTTP (e.g. http://127.0.0.1:7780) and ADMIN_API_KEY point at a
# running one. Not part of `make test`: it needs the dashboard checkout.
# docs/dashboard.md explains what is expected to pass.
set -euo pipefail
dash=$(cd "${1:?usage: $0 <dashboard checkout> [playwright args]}" && pwd); shift
repo=$(cd "$(dirname "$0")/../.." && pwd)
chromium=${CHROMIUM:-/usr/bin/chromium}
[ -x "$chromium" ] || { echo "no chromium at $chromium (apt-get install chromium)"; exit 1; }
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
work=$(mktemp -d); pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; rm -f "$dash/playwright.cyclesd.config.ts"; }
trap cleanup EXIT

if [ -z "${CYCLESD_HTTP:-}" ]; then
  (cd "$repo" && go build -o "$work/cyclesd" ./cmd/cyclesd)
  grpc_port=$(free_port); http_port=$(free_port)
  export ADMIN_API_KEY=dev-admin-key-change-me
  "$work/cyclesd" -listen "127.0.0.1:$grpc_port" -http-listen "127.0.0.1:$http_port" \
    -log-level warn >"$work/cyclesd.log" 2>&1 & pids+=($!)
  CYCLESD_HTTP="http://127.0.0.1:$http_port"
  for _ in $(seq 100); do curl -fsS "$CYCLESD_HTTP/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
fi
: "${ADMIN_API_KEY:?set ADMIN_API_KEY to the admin key of $CYCLESD_HTTP}"

cd "$dash"
[ -d node_modules ] || PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund
npx vite build --logLevel warn
port=$(free_port)
node "$repo/test/dashboard/proxy.mjs" dist "$port" "$CYCLESD_HTTP" & pids+=($!)
for _ in $(seq 50); do curl -fsS "http://127.0.0.1:$port/" >/dev/null 2>&1 && break; sleep 0.1; done

# The suite's own config, with Debian's chromium and no video or trace
# (Playwright's browser and ffmpeg downloads are not used).
cat > playwright.cyclesd.config.ts <<CONF
import base from './playwright.config'
export default {
  ...base,
  retries: 0,
  reporter: [['list']],
  use: {
    ...base.use,
    baseURL: 'http://127.0.0.1:$port',
    video: 'off',
    trace: 'off',
    launchOptions: { executablePath: '$chromium', args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync'] },
  },
}
CONF
DASHBOARD_URL="http://127.0.0.1:$port" PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 \
  npx playwright test -c playwright.cyclesd.config.ts "$@"
