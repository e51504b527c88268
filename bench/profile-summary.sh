#!/usr/bin/env bash
# Summarise a cyclesd CPU profile taken by `cycles-bench -profile op/shape/clients`
# into the text committed as bench/profile-*.txt (no binary profiles in git).
#   bench/profile-summary.sh bin/cycles-bench bench/results/cyclesd.cpu.pprof > bench/profile-reserve-50.txt
set -euo pipefail
bin=$1 prof=$2
top() { go tool pprof -unit=s -top -cum -nodecount=2000 "$bin" "$prof" 2>/dev/null; }
# "Total samples = 5370ms" or "= 5.37s": to seconds.
total=$(go tool pprof -top -nodecount=1 "$bin" "$prof" 2>/dev/null |
  sed -n 's/.*Total samples = \([0-9.]*\)\(m*s\).*/\1 \2/p' | awk '{ print ($2 == "ms") ? $1 / 1000 : $1 }')
cum() { # cumulative seconds of the first function matching $1
  top | awk -v re="$1" '$6 ~ re { gsub("s","",$4); print $4; exit }'
}
pct() { awk -v a="${1:-0}" -v t="$total" 'BEGIN { if (a == "") a = 0; printf "%5.1f%%", 100 * a / t }'; }
row() { printf "  %-58s %s\n" "$1" "$(pct "$(cum "$2")")"; }
echo "cyclesd CPU profile: $(basename "$prof"), $total s of samples"
echo
echo "Share of cyclesd's CPU (cumulative; rows overlap where nested):"
row "gRPC: one RPC end to end (handleStream)" 'grpc\.\(\*Server\)\.handleStream$'
row "  interceptor chain + handler (requestIDUnary)" 'server\.\(\*chain\)\.requestIDUnary$'
row "    ledger.Reserve (handler's work incl. Redis call)" 'ledger\.\(\*Ledger\)\.Reserve$'
row "      script.Executor.Run (go-redis round trip, pipelining)" 'script\.\(\*Executor\)\.Run$'
row "      decodeResult (script JSON -> snapshot)" 'ledger\.decodeResult$'
row "      reserveHash (idempotency payload SHA-256)" 'ledger\.reserveHash$'
row "      jsonOf (subject/action JSON)" 'ledger\.jsonOf$'
row "      derive (scopes, keys)" 'ledger\.derive$'
row "      events.Context (event-context ARGV)" 'events\.Context$'
row "      reserveResponse (response message)" 'ledger\.reserveResponse$'
row "    encoding/json decode of script results (RunInto)" 'encoding/json\.Unmarshal$'
row "    auth (API-key cache)" 'server\.\(\*authenticator\)\.authenticate$'
row "    request id / trace id" 'server\.withRequestID$'
row "  proto encode of responses (codec Marshal)" 'encoding/proto\.\(\*codecV2\)\.Marshal$'
row "pipelined Redis round trips (script pipeliner drain)" 'pipeliner\)\.drain$'
row "gRPC transport: frame reader (HandleStreams)" 'http2Server\)\.HandleStreams$'
row "gRPC transport: writer (loopyWriter.run)" 'loopyWriter\)\.run$'
row "otelgrpc stats handler (TagRPC)" 'otelgrpc\.\(\*serverHandler\)\.TagRPC$'
row "otelgrpc stats handler (HandleRPC)" 'otelgrpc\.\(\*serverHandler\)\.HandleRPC$'
row "OTel metric instruments (Add)" 'metric\.\(\*int64Inst\)\.Add$'
row "syscalls (read/write/epoll, all callers)" 'linux\.Syscall6$'
row "allocation (mallocgc)" 'runtime\.mallocgc$'
row "garbage collector (background mark)" 'runtime\.gcBgMarkWorker$'
row "stack growth (newstack)" 'runtime\.newstack$'
row "scheduler idle/spinning (findRunnable)" 'runtime\.findRunnable$'
echo
echo "Top 40 functions by own (flat) time:"
go tool pprof -top -nodecount=40 "$bin" "$prof" 2>/dev/null | sed -n '/flat%/,$p'
