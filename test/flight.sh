#!/usr/bin/env bash
# flight.sh — the flight recorder (issue 28, item 2; [Note: flight recorder] in
# src/runtime/flight.c) on real ranks started by hand (test/lib/ranks.sh) and by pprun:
# 1. a 4-stage job whose rank 2 is stopped (SIGSTOP) mid-run: every other rank fails
#    within a few timeouts and writes output.dir/flight/rank_NNNNN.txt, its error names
#    that file and the rank it was waiting on, and `pptrain flight` names rank 2, which
#    wrote nothing, as the head of the wait chain;
# 2. SIGUSR2 to a rank of a 2-stage job writes its file and the job goes on to the end,
#    every rank exiting 0; sent to scripts/pprun, it reaches every rank.
# PP_FLIGHT_STOPS=N repeats part 1 N times, stopping rank 2 at a random moment.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
T=1 # runtime.timeout_s
STOPS=${PP_FLIGHT_STOPS:-1}
tmp=$(mktemp -d /tmp/pptrain-flight.XXXXXX)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
  [ -n "${PP_KEEP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish
source "$(dirname "$0")/lib/ranks.sh" # free_port, start_rank

[ -s data/tiny/train.bin ] || skip_all "data/tiny not prepared (make data)"

# wait_step R: until rank R printed its first step (30 s at most).
wait_step() {
  for _ in $(seq 600); do
    grep -qE '^step +[0-9]' "$tmp/r$1.out" 2>/dev/null && return
    sleep 0.05
  done
}
# The first error line of rank $1, and its flight record part.
err() { grep -m1 'error: ' "$tmp/r$1.out"; }
flight_part() { err "$1" | grep -o '; flight record.*'; }
sanitized() { grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' "$tmp"/r*.out; }
# exit 1 for each of the ranks named
all_failed() { local r; for r in "$@"; do [ "${rcs[$r]}" -eq 1 ] || return 1; done; }

# ---- 1. a stopped rank: the others' flight records name it as the head of the chain
for run in $(seq "$STOPS"); do
  rm -f "$tmp"/r*.out
  port=$(free_port)
  pids=()
  for r in 0 1 2 3; do
    start_rank $r 4 "$port" --config configs/gpt-tiny.yaml --set pipeline.stages=4 \
      --set train.steps=100000 --set output.log_every=1 --set data.val_every=0 \
      --set runtime.timeout_s=$T --set output.dir="$tmp/run$run"
  done
  wait_step 3
  if [ "$STOPS" -gt 1 ]; then sleep "0.$((RANDOM % 10))"; else sleep 0.3; fi
  t0=$(date +%s%N)
  kill -STOP "${pids[2]}"
  rcs=()
  for r in 0 1 3; do
    for _ in $(seq 300); do kill -0 "${pids[$r]}" 2>/dev/null || break; sleep 0.05; done
    wait "${pids[$r]}"; rcs[$r]=$?
  done
  secs=$((($(date +%s%N) - t0) / 1000000)) # ms
  dir="$tmp/run$run/flight"
  "$PPTRAIN" flight "$dir" >"$tmp/merged.txt" 2>&1; mrc=$?
  file2=$(ls "$dir/rank_00002.txt" 2>/dev/null) # before it runs again
  kill -KILL "${pids[2]}"; kill -CONT "${pids[2]}" 2>/dev/null; wait "${pids[2]}" 2>/dev/null
  pids=()
  check "run $run: no sanitizer report" '! sanitized'
  check "run $run: ranks 0, 1, 3 fail (exit ${rcs[0]}, ${rcs[1]}, ${rcs[3]}) within 6 timeouts \
of the stop (${secs} ms)" 'all_failed 0 1 3 && [ $secs -lt $((6000 * T)) ]'
  for r in 0 1 3; do
    f=$(printf '%s/rank_%05d.txt' "$dir" $r)
    peer=$(sed -nE 's/^waiting: rank ([0-9]+) for .*/\1/p' "$f" 2>/dev/null)
    check "run $run: rank $r wrote $f, waiting on rank ${peer:-?}" '[ -s "$f" ] && [ -n "$peer" ]'
    said="; flight record $f: this rank (was waiting on rank $peer for "
    said+="|could not post .* to rank $peer\$)" # a send to a rank already gone
    check "run $run: rank $r's error names the file and the peer: $(flight_part $r)" \
      'err $r | grep -qE "$said"'
  done
  check "run $run: the stopped rank 2 wrote no file" '[ -z "$file2" ]'
  head=$(grep -m1 '^head' "$tmp/merged.txt")
  check "run $run: \`pptrain flight\` (exit $mrc) names rank 2 the head: $head" \
    '[ $mrc -eq 0 ] && grep -q "^head of the wait chain: rank 2: .*it wrote no flight" <<<"$head"'
  [ -n "${PP_KEEP:-}" ] && cp "$tmp"/r*.out "$tmp/merged.txt" "$tmp/run$run/"
done

# a file that is not a rank's record (rank 5 "of 4") is left out with its rows: the merged
# table of the last run's files has as many rows with it beside them as without
bogus="$tmp/bogus"
cp -r "$dir" "$bogus" && sed 's/^rank 0 of 4,/rank 5 of 4,/' "$dir/rank_00000.txt" >"$bogus/rank_00005.txt"
rows() { "$PPTRAIN" flight "$1" 2>/dev/null | grep -cE '^ +[0-9]+\.[0-9]+ +[0-9]+ '; }
check "pptrain flight leaves out a file of rank 5 of 4 and its rows ($(rows "$dir") rows, \
$(rows "$bogus") beside it)" \
  '[ "$(rows "$dir")" -gt 0 ] && [ "$(rows "$bogus")" = "$(rows "$dir")" ] &&
   grep -q "^rank 5 of 4," "$bogus/rank_00005.txt"'

# ---- 2. SIGUSR2: the file is written, the job goes on and ends well
port=$(free_port)
pids=()
for r in 0 1; do
  start_rank $r 2 "$port" --config configs/gpt-tiny.yaml --set train.steps=300 \
    --set output.log_every=1 --set data.val_every=0 --set runtime.timeout_s=$T \
    --set output.dir="$tmp/usr2"
done
wait_step 1
kill -USR2 "${pids[0]}"
f="$tmp/usr2/flight/rank_00000.txt"
for _ in $(seq 100); do [ -s "$f" ] && break; sleep 0.05; done
wait "${pids[0]}"; rc0=$?
wait "${pids[1]}"; rc1=$?
pids=()
check "SIGUSR2: rank 0 wrote $f" "grep -q '^reason: SIGUSR2' $f && grep -q '^rank 0 of 2' $f"
check "SIGUSR2: rank 0 said so" "grep -qF 'SIGUSR2: flight record written to $f' $tmp/r0.out"
check "SIGUSR2: the job went on to step 300, both ranks exit 0 ($rc0, $rc1)" \
  "[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && tail -n1 $tmp/usr2/losses.csv | grep -q '^300,'"
check "SIGUSR2: no temporary file left" '[ "$(ls "$tmp/usr2/flight")" = rank_00000.txt ]'

# ---- 3. SIGUSR2 to pprun reaches every rank
scripts/pprun --nproc-per-node 2 "$PPTRAIN" --config configs/gpt-tiny.yaml \
  --set train.steps=300 --set output.log_every=1 --set data.val_every=0 \
  --set output.dir="$tmp/pprun" >"$tmp/pprun.out" 2>&1 &
pprun_pid=$!
pids=("$pprun_pid")
for _ in $(seq 600); do
  grep -qE '^\[rank 1\] step +[0-9]' "$tmp/pprun.out" && break
  sleep 0.05
done
kill -USR2 "$pprun_pid"
wait "$pprun_pid"; rc=$?
pids=()
check "SIGUSR2 to pprun: both ranks wrote their file, the job exits 0 ($rc)" \
  '[ $rc -eq 0 ] && grep -q "^reason: SIGUSR2" "$tmp/pprun/flight/rank_00000.txt" &&
   grep -q "^reason: SIGUSR2" "$tmp/pprun/flight/rank_00001.txt"'
finish
