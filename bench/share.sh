#!/bin/bash
# Issue 30's bench on a GPU host, from the bundle (tests/gpu/bundle.sh): N sessions sharing one
# GPU natively time-sliced, natively under MPS, through rgpu time-sliced and through rgpu with
# sharing = mps, modes interleaved for each N; aggregate and each session's share. All of it
# under one timeout (SHARE_TIMEOUT, 570 s); bench/share.py has the knobs (SHARE_SECS, ...).
# Usage: bench/share.sh [BUNDLE_DIR]     Writes share.md and share.jsonl into $OUT (or /tmp).
ROOT=$(cd "$(dirname "$0")/.." && pwd)
exec timeout -k 15 "${SHARE_TIMEOUT:-570}" python3 -u "$ROOT/bench/share.py" "${1:-$ROOT/.bundle}"
