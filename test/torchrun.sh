#!/usr/bin/env bash
# torchrun.sh — the real torchrun launches pptrain (--no-python): 2 ranks train and the
# losses equal those of pprun's launch; with --max-restarts 1, a rank killed mid-run is
# restarted with its peer and --resume-if-present resumes from the last checkpoint, the
# losses equal an uninterrupted run's bit for bit (without the flag the restart exits 2
# saying to add it); SIGTERM to torchrun makes every rank
# save, and the same command resumes and finishes; two agents (--nnodes 2, c10d
# rendezvous) train as one job. The ranks report their own peak RSS,
# not that of torchrun's Python agent they were forked from. Skipped (says why, exits
# 77: make test counts it as skipped) where torchrun is absent; point TORCHRUN at one to
# run it (e.g. a venv with torch installed).
set -u
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib/check.sh"
source "$here/lib/runs.sh" # rows, nrows, wait_rows, rank_pid
PPTRAIN=${PPTRAIN:-./pptrain}
TORCHRUN=${TORCHRUN:-$(command -v torchrun || true)}
[ -n "$TORCHRUN" ] || skip_all "torchrun not found (set TORCHRUN=...)"
tmp=$(mktemp -d /tmp/pptrain-torchrun.XXXXXX)
bg=() # torchrun runs in the background, ended at exit if still there (each leads a group)
# end_ranks: SIGKILL the pptrain ranks of this test (an output.dir under $tmp) left running:
# torchrun starts each in a session of its own, which a signal to its group misses
end_ranks() {
  local p
  for p in /proc/[0-9]*; do
    [ "$(cat "$p/comm" 2>/dev/null)" = pptrain ] || continue
    tr '\0' '\n' <"$p/cmdline" 2>/dev/null | grep -q "^output.dir=$tmp/" && kill -KILL "${p#/proc/}" 2>/dev/null
  done
}
trap 'for p in "${bg[@]}"; do kill -KILL -- "-$p" 2>/dev/null; done; end_ranks
  [ -n "${PP_KEEP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"' EXIT
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT TORCHELASTIC_RUN_ID
same_rows() { [ "$(nrows "$1")" -gt 0 ] && cmp -s <(rows "$1") <(rows "$2"); } # A B
# tr2: torchrun for 2 ranks under timeout, which leads a process group of its own (so
# that the EXIT trap can end it whole) and passes a SIGTERM on to torchrun
tr2=(timeout 150 "$TORCHRUN" --nproc-per-node 2)
# wait_last SECONDS: wait for the last background torchrun, at most SECONDS (then end its
# group: status 124); its exit status
wait_last() {
  local p=${bg[-1]} i
  for i in $(seq $(($1 * 10))); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$p" 2>/dev/null && { kill -KILL -- "-$p"; end_ranks; wait "$p"; return 124; }
  wait "$p"
}

# 1. The README's command (Running on a cluster), with an output directory.
args=(--config configs/gpt-tiny.yaml --set train.steps=20 --set output.log_every=1)
timeout 120 "$TORCHRUN" --nproc-per-node 2 --no-python "$PPTRAIN" "${args[@]}" --set output.dir="$tmp/t" >"$tmp/t.out" 2>&1
rc=$?
timeout 120 "$here/../scripts/pprun" --nproc-per-node 2 "$PPTRAIN" "${args[@]}" --set output.dir="$tmp/p" >"$tmp/p.out" 2>&1
check "torchrun --no-python: 2 ranks (rc $rc), losses equal to pprun's" "[ $rc -eq 0 ] && same_rows $tmp/t $tmp/p"
rss=$(sed -n 's/^rank [0-9]*: per step.*peak RSS \([0-9.]*\) MB.*/\1/p' "$tmp/t.out" | sort -n | tail -n 1)
check "...each rank reports its own peak RSS (${rss:-none} MB at most), not the agent's" \
  "[ -n '$rss' ] && awk 'BEGIN { exit !($rss < 100) }'"

# The uninterrupted reference of parts 2 and 3 (pprun), checkpoints every 100 steps.
S=1200
long=(--config test/configs/pipe8.yaml --set pipeline.stages=2 --set train.steps=$S
  --set train.lr_schedule.decay=constant --set output.checkpoint_every=100 --set runtime.timeout_s=10)
timeout 120 "$here/../scripts/pprun" --nproc-per-node 2 "$PPTRAIN" "${long[@]}" --set output.dir="$tmp/ref" \
  >"$tmp/ref.out" 2>&1 || bad "the pprun reference failed: $(tail -n 3 "$tmp/ref.out")"

# kill_restarted NAME ROWS PPTRAIN-ARGS...: torchrun --max-restarts 1 into $tmp/NAME; rank 1
# SIGKILLed once the run has ROWS losses; torchrun's exit status (1 if rank 1 was not found)
kill_restarted() {
  local name=$1 rows=$2 victim=
  shift 2
  "${tr2[@]}" --max-restarts 1 --no-python "$PPTRAIN" "$@" --set output.dir="$tmp/$name" \
    >"$tmp/$name.out" 2>&1 &
  bg+=($!)
  wait_rows "$tmp/$name" "$rows" 60 && victim=$(rank_pid "$tmp/$name" 1)
  if [ -z "$victim" ]; then
    bad "torchrun --max-restarts 1 ($name): rank 1 not found after $rows steps: $(tail -n 3 "$tmp/$name.out")"
    wait_last 1
    return 1
  fi
  kill -KILL "$victim"
  wait_last 120
}

# 2. Elastic restart: rank 1 killed (SIGKILL) after 350 steps or more; rank 0 fails on
#    the lost peer, torchrun restarts both (--max-restarts 1), and --resume-if-present
#    resumes from the last checkpoint (every 100 steps).
if kill_restarted el 350 --resume-if-present "${long[@]}"; then
  at=$(sed -n 's/^resumed from .* at step \([0-9]*\)$/\1/p' "$tmp/el.out" | head -n 1)
  check "torchrun --max-restarts 1, rank 1 killed: restarted, resumed at step ${at:-none}, finished" \
    "[ '${at:-0}' -ge 300 ] && [ '${at:-0}' -lt $S ]"
  check "...losses ($(nrows "$tmp/el") rows) equal the uninterrupted run's bitwise" \
    "[ $(nrows "$tmp/el") -eq $S ] && same_rows $tmp/el $tmp/ref"
else
  bad "torchrun --max-restarts 1, rank 1 killed: torchrun failed: $(tail -n 3 "$tmp/el.out")"
fi

# 2b. The same without --resume-if-present: the restarted ranks find the run's checkpoints
#     and exit 2 at once, saying that torchrun restarted them and what to add.
kill_restarted nores 150 "${long[@]}"
rc=$?
check "...without --resume-if-present the restart exits 2 saying what to add (torchrun rc $rc)" \
  "[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qF 'torchrun restarted this worker group (TORCHELASTIC_RESTART_COUNT=1) without --resume-if-present: put it on the command line' $tmp/nores.out"

# 3. SIGTERM to torchrun: it passes SIGTERM to the ranks (twice, at once), which save and
#    exit 0 leaving output.dir/interrupted; torchrun itself exits non-zero (it was
#    signalled). The same command then resumes and finishes.
"${tr2[@]}" --no-python "$PPTRAIN" --resume-if-present "${long[@]}" --set output.dir="$tmp/term" \
  >"$tmp/term.out" 2>&1 &
bg+=($!)
if wait_rows "$tmp/term" 250 60; then
  kill -TERM "${bg[-1]}"
  wait_last 60
  rc=$?
  stopped=$(cat "$tmp/term/interrupted" 2>/dev/null)
  check "SIGTERM to torchrun: the ranks saved (${stopped:-no interrupted marker}); torchrun exits non-zero (rc $rc)" \
    "grep -q '^stopped on SIGTERM after step [0-9]*;' $tmp/term/interrupted && [ $rc -ne 0 ] && [ $rc -ne 124 ]"
  timeout 120 "$TORCHRUN" --nproc-per-node 2 --no-python "$PPTRAIN" --resume-if-present "${long[@]}" \
    --set output.dir="$tmp/term" >"$tmp/term2.out" 2>&1
  rc=$?
  check "...the same command resumes and finishes (rc $rc): losses ($(nrows "$tmp/term") rows) equal the uninterrupted run's" \
    "[ $rc -eq 0 ] && [ $(nrows "$tmp/term") -eq $S ] && same_rows $tmp/term $tmp/ref && [ ! -e $tmp/term/interrupted ]"
else
  bad "SIGTERM to torchrun: no 250 steps in 60 s: $(tail -n 3 "$tmp/term.out")"
fi

# 4. Two "nodes": two torchrun agents of one rank each, meeting by torchrun's own c10d
#    rendezvous (--rdzv-backend c10d), as on two hosts; the losses equal pprun's.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for n in 0 1; do
  timeout 120 "$TORCHRUN" --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:"$port" \
    --rdzv-id "pptrain-test-$$" --no-python "$PPTRAIN" "${args[@]}" --set output.dir="$tmp/nodes" \
    >"$tmp/nodes$n.out" 2>&1 &
  bg+=($!)
done
wait "${bg[-2]}"; rc0=$?
wait "${bg[-1]}"; rc1=$?
check "torchrun --nnodes 2 --rdzv-backend c10d, one rank a node (rc $rc0, $rc1): losses equal pprun's" \
  "[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && same_rows $tmp/nodes $tmp/p"
finish
