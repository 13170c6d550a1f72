#!/usr/bin/env bash
# Installs the load generators the benchmarks use: wrk (Debian) for throughput at a fixed
# concurrency, vegeta (Go module proxy) for latency at a fixed rate. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$PWD/.cache/bin"
mkdir -p "$BIN"
if ! command -v wrk >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
  else
    echo "wrk is missing: apt-get install wrk" >&2; exit 1
  fi
fi
if [ ! -x "$BIN/vegeta" ]; then
  GOBIN="$BIN" go install github.com/tsenart/vegeta/v12@v12.13.0
fi
echo "wrk: $(command -v wrk); vegeta: $BIN/vegeta"
