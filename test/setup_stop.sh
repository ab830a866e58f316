#!/usr/bin/env bash
# setup_stop.sh — SIGTERM or SIGINT during a long setup ends the run at once ([Note: a
# signal during setup] in src/main.c): the rank exits 128 + the signal (143, 130) within
# seconds, saying so on one line, and leaves nothing in output.dir but the lock file; a
# rank waiting in the rendezvous stops as promptly; under pprun the other rank stops too;
# started by hand, a rank blocked on the one that left exits 1 naming it, and one whose rank
# 0 never came says so while it waits, then exits 1 at the timeout. (A signal after
# the first step still saves a checkpoint and exits 0: test/checkpoint.sh part 6, and
# test/slurm.sh for the interrupted marker.)
#
# The slow setup: token files of 2^31-1 uint32 tokens (8 GiB each) that are sparse (a
# few KB on disk: holes read as token 0), whose check (data_open reads every block) takes
# about 20 s each on the 2-core test machine: 45 s with data.val too, against about 2 ms
# from SIGTERM to the exit with the fix. The bound is 10 s; a run that outlives it is
# killed and fails the check, so the whole script takes seconds (about 60 s before the fix).
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-setupstop.XXXXXX)
pids=() kids=() # the runs started here; pprun's ranks
cleanup() {
  local p
  for p in "${pids[@]}" "${kids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  [ -n "${PP_KEEP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish
source "$(dirname "$0")/lib/ranks.sh" # free_port, start_rank
BOUND=10                              # seconds from the signal to the exit

[ -s data/tiny/train.bin ] || skip_all "data/tiny not prepared (make data)"
python3 - "$tmp/s.bin" "$tmp/t.bin" "$tmp/v.bin" <<'PY' || skip_all "cannot make sparse token files in $tmp"
import struct, sys
for path in sys.argv[1:]:
    n = 2**28 if path.endswith("s.bin") else 2**31 - 1  # 1 GiB; the most a header counts
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240801, 7, n, *[0] * 253))  # uint32 tokens
        f.truncate(1024 + 4 * n)  # a hole: no blocks on disk
PY
[ "$(du -k "$tmp/t.bin" | cut -f1)" -lt 1024 ] || skip_all "$tmp does not keep files sparse"
slow=(--config configs/gpt-tiny.yaml --set data.train="$tmp/t.bin" --set data.val="$tmp/v.bin"
  --set data.val_every=1 --set train.steps=2)

now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }
# ready FILE: wait (at most 30 s) until FILE exists, i.e. until the ranks have installed
# their handlers (output.dir/lock: rank 0 takes it after the rendezvous); then 0.3 s more,
# into the token files' check.
ready() {
  local i
  for i in $(seq 300); do [ -e "$1" ] && break; sleep 0.1; done
  sleep 0.3
  [ -e "$1" ]
}
# bounded PID: wait at most $BOUND s for PID to end (then SIGKILL); sets rc and ms (the
# milliseconds from the call to the end).
bounded() {
  local t0 i
  t0=$(now_ms)
  for i in $(seq $((BOUND * 20))); do kill -0 "$1" 2>/dev/null || break; sleep 0.05; done
  ms=$(($(now_ms) - t0))
  kill -KILL "$1" 2>/dev/null
  wait "$1"
  rc=$?
}
# only_lock DIR [FILE...]: DIR holds the lock file and the FILEs, nothing else (no
# checkpoint, losses.csv, trace part, tb/ or flight/ record).
only_lock() {
  local d=$1
  shift
  [ "$(cd "$d" && find . -mindepth 1 | sort | tr '\n' ' ')" = "$(printf './%s\n' lock "$@" | sort | tr '\n' ' ')" ]
}
msg() { echo "pptrain: rank $1: $2 during setup (before the first step): stopping; nothing trained, nothing to save"; }
has() { grep -qF -- "$1" "$2"; } # has TEXT FILE (pprun prefixes its lines: "[rank R] ")

# 1. One rank, SIGTERM, then SIGINT, while it checks the token files. The interrupted
#    marker an earlier run left stays as it was.
for sig in TERM INT; do
  out=$tmp/one-$sig
  mkdir -p "$out" && echo "stopped on SIGUSR1 after step 7; resume from checkpoints/latest" >"$out/interrupted"
  "$PPTRAIN" "${slow[@]}" --set pipeline.stages=1 --set output.dir="$out" >"$out.log" 2>&1 &
  pid=$! pids=("$pid")
  ready "$out/lock" || bad "1 rank: no output.dir/lock within 30 s: $(tail -n 3 "$out.log")"
  kill -s "$sig" "$pid"
  bounded "$pid"
  want=$((128 + $(kill -l "$sig")))
  check "1 rank, SIG$sig during setup: exit $want (got $rc) in $ms ms (< ${BOUND} s; the setup takes ~45 s)" \
    "[ $rc -eq $want ] && [ $ms -lt $((BOUND * 1000)) ]"
  check "1 rank, SIG$sig during setup: says so on one line: $(grep -F 'during setup' "$out.log" | head -n1)" \
    "has '$(msg 0 "SIG$sig")' '$out.log'"
  check "1 rank, SIG$sig during setup: output.dir holds only its lock and the earlier marker ($(ls "$out" | tr '\n' ' '))" \
    "only_lock '$out' interrupted && grep -q 'after step 7' '$out/interrupted'"
done

# 2. A rank waiting in the rendezvous (its peer never comes; runtime.timeout_s 120).
for r in 0 1; do
  port=$(free_port) pids=()
  start_rank "$r" 2 "$port" "${slow[@]}" --set runtime.timeout_s=120 --set output.dir="$tmp/rdzv$r"
  mv "$tmp/r$r.out" "$tmp/rdzv$r.log" 2>/dev/null # start_rank's name, kept apart
  sleep 1                                         # into the rendezvous: listening or dialling
  kill -TERM "${pids[0]}"
  bounded "${pids[0]}"
  check "rank $r of 2 alone in the rendezvous, SIGTERM: exit 143 (got $rc) in $ms ms (else runtime.timeout_s, 120 s)" \
    "[ $rc -eq 143 ] && [ $ms -lt $((BOUND * 1000)) ] && has '$(msg "$r" SIGTERM)' '$tmp/rdzv$r.log'"
done
pids=()

# 3. Two ranks under pprun, SIGTERM to rank 1 alone: it stops, pprun stops rank 0 (which
#    is in its setup too), both say so, pprun exits 143.
out=$tmp/pp
scripts/pprun --nproc-per-node 2 "$PPTRAIN" "${slow[@]}" --set output.dir="$out" >"$out.log" 2>&1 &
pp=$! pids=("$pp")
ready "$out/lock" || bad "pprun: no output.dir/lock within 30 s: $(tail -n 3 "$out.log")"
r1=
for k in $(pgrep -P "$pp"); do tr '\0' '\n' <"/proc/$k/environ" 2>/dev/null | grep -qx RANK=1 && r1=$k; done
kids=($(pgrep -P "$pp"))
if [ -z "$r1" ]; then
  bad "pprun: rank 1's process not found among pprun's children"
else
  kill -TERM "$r1"
  bounded "$pp"
  check "pprun, SIGTERM to rank 1 during setup: pprun exits 143 (got $rc) in $ms ms" \
    "[ $rc -eq 143 ] && [ $ms -lt $((BOUND * 1000)) ]"
  for r in 1 0; do
    check "pprun: rank $r says it stopped during setup: $(grep -F "rank $r: SIGTERM" "$out.log" | head -n1)" \
      "has '$(msg "$r" SIGTERM)' '$out.log'"
  done
  check "pprun: output.dir holds only its lock ($(ls "$out" | tr '\n' ' '))" "only_lock '$out'"
fi
pids=()

# 4. Three stages started by hand (no launcher to stop the others): SIGTERM to rank 0
#    while it checks the token files. Rank 1 (the middle stage reads no tokens: its setup
#    is short) is then blocked on rank 0 and exits 1 at once naming it; rank 2, checking
#    the file too, exits 1 once it next talks to the others (a 1 GiB file, data.val left
#    out: its check takes seconds).
port=$(free_port)
for r in 0 1 2; do
  start_rank "$r" 3 "$port" "${slow[@]}" --set data.train="$tmp/s.bin" --set data.val=null \
    --set data.val_every=0 --set pipeline.stages=3 --set output.dir="$tmp/hand"
done
ready "$tmp/hand/lock" || bad "3 ranks by hand: no output.dir/lock within 30 s: $(tail -n 3 "$tmp/r0.out")"
kill -TERM "${pids[0]}"
bounded "${pids[0]}"
check "by hand, rank 0 of 3, SIGTERM during setup: exit 143 (got $rc) in $ms ms, saying so" \
  "[ $rc -eq 143 ] && [ $ms -lt $((BOUND * 1000)) ] && has '$(msg 0 SIGTERM)' '$tmp/r0.out'"
bounded "${pids[1]}"
check "by hand, rank 1 (blocked on rank 0) exits 1 (got $rc) in $ms ms naming rank 0: $(grep -m1 'error: ' "$tmp/r1.out")" \
  "[ $rc -eq 1 ] && grep -m1 'error: ' '$tmp/r1.out' | grep -q 'rank 0'"
BOUND=30 bounded "${pids[2]}"
check "by hand, rank 2 exits 1 (got $rc) once its own check is done ($ms ms more): $(grep -m1 'error: ' "$tmp/r2.out")" \
  "[ $rc -eq 1 ] && grep -m1 'error: ' '$tmp/r2.out' | grep -q 'rank [01]'"
pids=()

# 5. Rank 1 of 2 started by hand without its rank 0 (dead, or never launched): while it
#    tries to reach rank 0 it says so every quarter of runtime.timeout_s (at most 30 s),
#    then exits 1 at the timeout naming rank 0's address.
port=$(free_port)
rm -f "$tmp/r1.out"
start_rank 1 2 "$port" --config configs/gpt-tiny.yaml --set runtime.timeout_s=10 --set output.dir="$tmp/alone"
BOUND=18 bounded "${pids[0]}"
notes=$(grep -c "rank 0 at 127.0.0.1:$port not reached yet (Connection refused); trying until runtime.timeout_s = 10 s runs out" "$tmp/r1.out")
check "rank 1 without rank 0: $notes line(s) while it waits, then exit 1 (got $rc) in $ms ms: $(grep -m1 'error: ' "$tmp/r1.out" | cut -c1-90)" \
  "[ $rc -eq 1 ] && [ $notes -ge 2 ] && [ $ms -lt 14000 ] && grep -q 'error: could not reach rank 0 at 127.0.0.1:$port' '$tmp/r1.out'"
pids=()
check "no sanitizer report" "! grep -lE 'AddressSanitizer|LeakSanitizer|runtime error:' $tmp/*.log $tmp/r*.out"
finish
