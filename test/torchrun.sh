#!/usr/bin/env bash
# torchrun.sh — the real torchrun launches pptrain (--no-python): 2 ranks train and the
# losses equal those of pprun's launch. Skipped (says why, exits 77: make test counts it
# as skipped) where torchrun is absent; point TORCHRUN at one to run it (e.g. a venv with
# torch installed).
set -u
# skip WHY: the skip protocol of make test (Makefile): say why, note it, exit 77
skip() { echo "torchrun.sh: skipped: $1"; [ -z "${PP_TEST_SKIPS:-}" ] || echo "$1" >>"$PP_TEST_SKIPS"; exit 77; }
PPTRAIN=${PPTRAIN:-./pptrain}
TORCHRUN=${TORCHRUN:-$(command -v torchrun || true)}
[ -n "$TORCHRUN" ] || skip "torchrun not found (set TORCHRUN=...)"
tmp=$(mktemp -d /tmp/pptrain-torchrun.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# the README's command (Running on a cluster), with an output directory
args=(--config configs/gpt-tiny.yaml --set train.steps=20 --set output.log_every=1)
timeout 120 "$TORCHRUN" --nproc-per-node 2 --no-python "$PPTRAIN" "${args[@]}" --set output.dir="$tmp/t" >"$tmp/t.out" 2>&1
rc=$?
timeout 120 scripts/pprun --nproc-per-node 2 "$PPTRAIN" "${args[@]}" --set output.dir="$tmp/p" >"$tmp/p.out" 2>&1
if [ $rc -eq 0 ] && cmp -s <(cut -d, -f1,2 "$tmp/t/losses.csv") <(cut -d, -f1,2 "$tmp/p/losses.csv"); then
  echo "ok   torchrun --no-python: 2 ranks, losses equal to pprun's"; echo "torchrun.sh: 1 passed, 0 failed"
else
  echo "FAIL torchrun: rc=$rc $(tail -n 5 "$tmp/t.out")"; echo "torchrun.sh: 0 passed, 1 failed"; exit 1
fi
