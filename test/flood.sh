#!/usr/bin/env bash
# flood.sh — a connection flood cannot stop a job (issue 25, item 1). test/flood.c makes
# plain, silent TCP connections to one loopback port at 6,000 a second, holding the
# newest 2,000 open (more than a rank's door holds: it must shed some): (a) at rank 0's
# rendezvous port while rank 1 joins (2 ranks, no job token: the flood needs none),
# (b) at rank 1's mesh port while the late rank 3 connects (4 ranks, PPTRAIN_JOB_TOKEN
# set); each three times. Every flooded job must complete with losses.csv equal, bit
# for bit, to the unflooded job's; the flood must have made >= 5,000 connections a
# second, >= 2,000 of them reaching the port; and the flooded rank logs it once, as a
# count, not a line per connection. Ranks are started by hand (test/lib/ranks.sh), so
# the test knows every PID; it ends only the processes it started, by PID.
# PP_FLOOD_RUNS=N floods each port N times; PP_FLOOD_KEEP=1 keeps the outputs.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
FLOOD=${FLOOD:-build/cpu/test/flood}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 1 # the config's data paths are relative to the repository
tmp=$(mktemp -d /tmp/pptrain-flood.XXXXXX)
pids=() # the ranks started here (start_rank appends)
# Only this shell's children that were not waited for yet (jobs -p): a PID that was
# waited for may already be another process's.
cleanup() {
  local p
  for p in $(jobs -p); do kill -KILL "$p" 2>/dev/null; done
  [ -n "${PP_FLOOD_KEEP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT
source test/lib/check.sh # ok, bad, check, skip, skip_all, finish
source test/lib/ranks.sh # free_port, start_rank
[ -x "$FLOOD" ] || skip_all "no flood generator at $FLOOD (make $FLOOD)"

RATE=6000 SECONDS_MAX=3 HOLD=2000 RUNS=${PP_FLOOD_RUNS:-3}
cfg=(--config configs/gpt-tiny.yaml --set train.steps=3 --set data.val_every=0
     --set output.log_every=1 --set runtime.threads=1 --set runtime.timeout_s=20)
SAN='AddressSanitizer|LeakSanitizer|runtime error:'

# The TCP ports PID listens on, one a line (its sockets' inodes in /proc/net/tcp{,6}).
listen_ports() {
  local inodes hex
  inodes=$(find "/proc/$1/fd" -lname 'socket:*' -printf '%l\n' 2>/dev/null | tr -dc '0-9\n')
  [ -n "$inodes" ] || return 0
  for hex in $(awk -v set="$(tr '\n' ' ' <<<"$inodes")" '
      BEGIN { n = split(set, a, " "); for (i = 1; i <= n; i++) want[a[i]] = 1 }
      FNR > 1 && $4 == "0A" && ($10 in want) { split($2, la, ":"); print la[2] }' \
      /proc/net/tcp /proc/net/tcp6 2>/dev/null); do
    echo $((16#$hex))
  done
}

# wait_ranks LIMIT FIRST COUNT: wait up to LIMIT s for pids[FIRST .. FIRST+COUNT-1] to
# exit (a hang is killed, by PID, and fails); their exit codes in rcs, space-separated.
wait_ranks() {
  local limit=$1 first=$2 count=$3 t=0 i alive
  while [ "$t" -lt $((limit * 10)) ]; do
    alive=0
    for ((i = first; i < first + count; i++)); do kill -0 "${pids[i]}" 2>/dev/null && alive=1; done
    [ $alive -eq 0 ] && break
    sleep 0.1; t=$((t + 1))
  done
  rcs=
  for ((i = first; i < first + count; i++)); do
    kill -KILL "${pids[i]}" 2>/dev/null
    wait "${pids[i]}"; rcs="$rcs $?"
  done
  rcs=${rcs# }
}

# rows DIR: losses.csv without its timing columns (step, loss, lr, grad_norm).
rows() { tail -n +2 "$1/losses.csv" 2>/dev/null | cut -d, -f1-4; }

# job NAME WORLD LATE TARGET: a job of WORLD ranks into $tmp/NAME; rank LATE starts last.
# TARGET: "" for no flood; "rdzv" floods rank 0's port before rank LATE starts; "mesh"
# floods rank 1's mesh port (once rank 1 has joined the rendezvous) before rank LATE
# starts. Leaves the ranks' outputs in $tmp/NAME/rR.out, the flood's in $tmp/NAME/flood.
job() {
  local name=$1 P=$2 late=$3 target=$4 port r first=${#pids[@]} fport= fpid= t
  local saved=$tmp
  mkdir -p "$tmp/$name"
  port=$(free_port)
  tmp=$tmp/$name # start_rank writes $tmp/rR.out
  for ((r = 0; r < P; r++)); do
    [ "$r" -eq "$late" ] || start_rank "$r" "$P" "$port" "${cfg[@]}" --set pipeline.stages="$P" \
      --set output.dir="$tmp/run"
  done
  if [ -n "$target" ]; then
    if [ "$target" = rdzv ]; then fport=$port
    else # rank 1's mesh port: its only listening socket, once it has joined
      for ((t = 0; t < 100; t++)); do
        fport=$(listen_ports "${pids[first + 1]}" | head -n 1)
        [ -n "$fport" ] && break
        sleep 0.1
      done
    fi
    if [ -n "$fport" ]; then
      "$FLOOD" "$fport" $RATE $SECONDS_MAX $HOLD >"$tmp/flood" 2>&1 &
      fpid=$!
      for ((t = 0; t < 50; t++)); do grep -q started "$tmp/flood" && break; sleep 0.1; done
      sleep 0.5 # the backlog and the door fill up before the late rank comes
    fi
  fi
  start_rank "$late" "$P" "$port" "${cfg[@]}" --set pipeline.stages="$P" --set output.dir="$tmp/run"
  tmp=$saved
  wait_ranks 60 "$first" "$P"
  [ -n "$fpid" ] && wait "$fpid"
  [ -n "$target" ] && [ -z "$fport" ] && echo "no mesh port found for rank 1" >"$tmp/$name/flood"
  return 0
}

# flooded LABEL NAME REF WHO WORLD DOOR: the checks of one flooded job of WORLD ranks
# against the reference REF; WHO is the rank whose port was flooded, DOOR what its log
# calls that port ("the rendezvous", "this rank's mesh port").
flooded() {
  local label=$1 d=$tmp/$2 ref=$tmp/$3/run who=$4 door=$6 line rate est made lines counts
  line=$(grep -m1 'connections to' "$d/flood")
  made=$(sed -nE 's/^flood: ([0-9]+) connections.*/\1/p' <<<"$line")
  rate=$(sed -nE 's/.*\(([0-9]+)\/s\).*/\1/p' <<<"$line")
  est=$(sed -nE 's/.*: ([0-9]+) established.*/\1/p' <<<"$line")
  if [ "${rate:-0}" -ge 5000 ] && [ "${est:-0}" -ge 2000 ]; then ok "$label: ${line#flood: }"
  else bad "$label: the flood fell short (want >= 5000/s, >= 2000 established): $(cat "$d/flood")"; fi
  if [ "$rcs" = "$(seq "$5" | sed 's/.*/0/' | paste -sd' ')" ]; then ok "$label: every rank exited 0"
  else bad "$label: exit codes $rcs; $(grep -h -m1 'error:' "$d"/r*.out | head -n 2 | cut -c1-300 | tr '\n' ' ')"; fi
  if [ -n "$(rows "$ref")" ] && [ "$(rows "$d/run")" = "$(rows "$ref")" ]; then
    ok "$label: losses.csv equals the unflooded run's ($(rows "$d/run" | wc -l) steps)"
  else bad "$label: losses.csv differs from the unflooded run's"; fi
  lines=$(grep -c 'warning: dropped a connection' "$d/r$who.out")
  counts=$(grep -c "warning: dropped [0-9]* connection(s) to $door in all" "$d/r$who.out")
  if [ "$lines" -eq 0 ] && [ "$counts" -eq 1 ]; then
    ok "$label: rank $who logged the flood once, as a count: $(grep -m1 "to $door in all" "$d/r$who.out" | cut -c1-240)"
  else bad "$label: rank $who logged $lines dropped connections one by one and $counts counts for $door"; fi
  if grep -qE "$SAN" "$d"/r*.out; then bad "$label: a sanitizer report: $(grep -h -m1 -E "$SAN" "$d"/r*.out)"; fi
}

# ---- the unflooded references ------------------------------------------------------
unset PPTRAIN_JOB_TOKEN
job ref2 2 1 ""
check "the unflooded 2-rank job completes (exit $rcs)" '[ "$rcs" = "0 0" ] && [ -n "$(rows "$tmp/ref2/run")" ]'
export PPTRAIN_JOB_TOKEN=flood-test-$RANDOM-0123456789abcdef
job ref4 4 3 ""
check "the unflooded 4-rank job completes (exit $rcs)" '[ "$rcs" = "0 0 0 0" ] && [ -n "$(rows "$tmp/ref4/run")" ]'

# ---- (a) rank 0's rendezvous port, no token ------------------------------------------
unset PPTRAIN_JOB_TOKEN
for i in $(seq "$RUNS"); do
  job "rdzv$i" 2 1 rdzv
  flooded "rendezvous flood $i" "rdzv$i" ref2 0 2 "the rendezvous"
done

# ---- (b) rank 1's mesh port while rank 3 comes late, with a token -----------------------
export PPTRAIN_JOB_TOKEN=flood-test-$RANDOM-0123456789abcdef
for i in $(seq "$RUNS"); do
  job "mesh$i" 4 3 mesh
  flooded "mesh flood $i" "mesh$i" ref4 1 4 "this rank's mesh port"
done

finish
