#!/usr/bin/env bash
# Proves the Python and TypeScript clients against a real cyclesd: installs
# what is missing (apt, npm), generates both sets of stubs from proto/, starts
# a dev-mode cyclesd on free ports, runs examples/python and
# examples/typescript, and fails if any step does. `make test-clients`.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-/usr/bin/python3}
[ -x "$PYTHON" ] || PYTHON=python3
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"

# Python: grpcio and protobuf from Debian; protoc >= 3.15 (proto3 `optional`)
# and grpc_python_plugin from Debian too.
if ! command -v protoc >/dev/null || ! command -v grpc_python_plugin >/dev/null \
   || ! "$PYTHON" -c 'import grpc, google.protobuf' 2>/dev/null; then
  echo "installing python3-grpcio python3-protobuf protobuf-compiler protobuf-compiler-grpc with apt"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
    python3-grpcio python3-protobuf protobuf-compiler protobuf-compiler-grpc >/dev/null
  PYTHON=/usr/bin/python3
fi
pv=$(protoc --version | awk '{print $2}')
if ! printf '3.15.0\n%s\n' "$pv" | sort -V -C; then
  echo "protoc $pv is too old: proto3 optional needs >= 3.15" >&2; exit 1
fi

# TypeScript: protobuf-es v2, Connect v2, buf and protoc-gen-es from npm (lock file).
command -v npm >/dev/null || { echo "node and npm are required" >&2; exit 1; }
# npm ci again whenever the lock file is newer than the installed tree.
(cd examples/typescript && { [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund --loglevel=error; })
GOOGLE_PROTOS=$ROOT/examples/typescript/node_modules/google-proto-files

echo "generating stubs"
(cd examples/typescript && rm -rf gen && npm run --silent generate && npx --no-install tsc --noEmit)
rm -rf examples/python/gen && mkdir -p examples/python/gen
protoc -I proto -I "$GOOGLE_PROTOS" \
  --python_out=examples/python/gen --grpc_python_out=examples/python/gen \
  --plugin=protoc-gen-grpc_python="$(command -v grpc_python_plugin)" \
  proto/cycles/v1/*.proto google/rpc/status.proto google/rpc/error_details.proto

# A dev-mode cyclesd (embedded store) on free ports.
free_port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
GRPC_PORT=$(free_port); HTTP_PORT=$(free_port)
mkdir -p bin && go build -o bin/cyclesd ./cmd/cyclesd
# One scratch directory for the log and for tsx's compile cache (tsx writes
# $TMPDIR/tsx-<uid>), removed on exit so nothing is left in TMPDIR.
SCRATCH=$(mktemp -d)
LOG=$SCRATCH/cyclesd.log
bin/cyclesd -listen "127.0.0.1:$GRPC_PORT" -http-listen "127.0.0.1:$HTTP_PORT" -metrics-addr= >"$LOG" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true; rm -rf "$SCRATCH"' EXIT
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$HTTP_PORT/readyz" >/dev/null 2>&1 && break
  kill -0 $PID 2>/dev/null || { cat "$LOG"; exit 1; }
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$HTTP_PORT/readyz" >/dev/null || { echo "cyclesd never became ready"; cat "$LOG"; exit 1; }

export CYCLES_GRPC=127.0.0.1:$GRPC_PORT CYCLES_HTTP=http://127.0.0.1:$HTTP_PORT CYCLES_ADMIN_KEY=dev-admin-key-change-me
status=0
echo "== python (grpcio, native gRPC)"
timeout 60 "$PYTHON" examples/python/main.py || status=1
echo "== typescript (Connect JSON + gRPC-Web)"
(cd examples/typescript && TMPDIR=$SCRATCH timeout 60 npx --no-install tsx main.ts) || status=1
[ $status = 0 ] || { echo "--- cyclesd log"; tail -50 "$LOG"; }
exit $status
