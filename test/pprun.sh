#!/usr/bin/env bash
# pprun.sh — scripts/pprun with tiny bash children: the environment each rank gets,
# "[rank R] " prefixes on whole lines, stdout and stderr kept apart, --log-dir, a failing
# rank's exit code and the quick stop of the others (SIGTERM, then SIGKILL after
# --grace), SIGTERM/SIGUSR1 forwarding, and --max-restarts (bash children, then pptrain
# resuming after a killed rank with the uninterrupted losses). Exits non-zero on any
# failure.
set -u
PPRUN_BIN="$(cd "$(dirname "$0")/.." && pwd)/scripts/pprun"
TMP=$(mktemp -d)
source "$(dirname "$0")/lib/runs.sh" # wait_rows, rank_pid
failures=0

# Ranks of the signal test record their PIDs here; each leads its own process group,
# which cleanup kills should a broken pprun leave one behind.
cleanup() {
  for f in "$TMP"/pid.*; do [ -e "$f" ] && kill -KILL -- "-$(cat "$f")" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT

# A broken pprun must fail this test, not hang it.
PPRUN() { timeout -k 2 20 "$PPRUN_BIN" "$@"; }
# check WHAT COMMAND...: report whether COMMAND succeeds.
check() {
  local what=$1
  shift
  if "$@"; then echo "ok:   $what"; else echo "FAIL: $what" >&2; failures=$((failures + 1)); fi
}
now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); } # bash 5
has_line() { grep -qxF -- "$1" "$2"; }                            # has_line LINE FILE
lacks() { ! grep -qF -- "$1" "$2"; }                               # lacks TEXT FILE
between() { [ "$1" -ge "$2" ] && [ "$1" -lt "$3" ]; }              # between X LO HI

# --help documents the options; usage errors exit 2.
PPRUN --help >"$TMP/help" 2>&1
check "--help exits 0" [ $? -eq 0 ]
for opt in --nproc-per-node --nnodes --node-rank --master-addr --master-port --log-dir \
           --grace --max-restarts; do
  check "--help documents $opt" grep -q -- "$opt" "$TMP/help"
done
PPRUN --nnodes 2 --node-rank 2 --master-addr h --master-port 1 true 2>/dev/null
check "bad --node-rank exits 2" [ $? -eq 2 ]
PPRUN --nnodes 2 --node-rank 0 --master-addr h --master-port 1 --max-restarts 1 true 2>"$TMP/mr.err"
check "--max-restarts with --nnodes 2 exits 2 naming torchrun and SLURM" \
  [ $? -eq 2 -a -n "$(grep -F 'needs --nnodes 1' "$TMP/mr.err" | grep -F PPTRAIN_RETRY_FAILED)" ]

# --max-restarts: a failing job starts again, M times, PPRUN_RESTART_COUNT numbering the
# restarts; exit 2 (a usage error) is not restarted; --log-dir keeps every attempt.
PPRUN --nproc-per-node 2 --max-restarts 2 --log-dir "$TMP/mrlogs" \
  bash -c 'echo "attempt ${PPRUN_RESTART_COUNT:-0}"; exit 3' >"$TMP/mr.out" 2>"$TMP/mr.err"
rc=$?
check "--max-restarts 2, ranks exit 3: 3 attempts (counts 0 1 2 on each rank), exit 3 (rc $rc)" \
  [ $rc -eq 3 -a "$(grep '^\[rank 1\]' "$TMP/mr.out" | tr '\n' ' ')" = "[rank 1] attempt 0 [rank 1] attempt 1 [rank 1] attempt 2 " \
    -a "$(grep -c 'pprun: restarting the 2 ranks' "$TMP/mr.err")" -eq 2 \
    -a "$(tr '\n' ' ' <"$TMP/mrlogs/rank_1.log")" = "attempt 0 attempt 1 attempt 2 " ]
PPRUN_RESTART_COUNT=7 PPRUN --max-restarts 1 bash -c 'echo "count $PPRUN_RESTART_COUNT"' >"$TMP/mr0.out" 2>&1
check "...the first attempt gets PPRUN_RESTART_COUNT=0, not the caller's" has_line "[rank 0] count 0" "$TMP/mr0.out"
# a signal to pprun stops the job for good: no restart
# (pprun itself, not under timeout, which would pass the TERM on twice: a kill)
"$PPRUN_BIN" --nproc-per-node 2 --max-restarts 2 bash -c 'trap "exit 1" TERM; sleep 10 & wait' \
  >/dev/null 2>"$TMP/mr3.err" &
mr3=$!
sleep 1
kill -TERM "$mr3"
for i in $(seq 100); do kill -0 "$mr3" 2>/dev/null || break; sleep 0.1; done
kill -KILL "$mr3" 2>/dev/null
wait "$mr3"
rc=$?
check "--max-restarts 2, SIGTERM to pprun (ranks exit 1): not restarted (rc $rc)" \
  [ $rc -eq 1 -a -z "$(grep -F 'restarting the' "$TMP/mr3.err")" ]
PPRUN --nproc-per-node 2 --max-restarts 2 bash -c 'exit 2' >/dev/null 2>"$TMP/mr2.err"
rc=$?
check "--max-restarts 2, ranks exit 2: not restarted, saying why (rc $rc)" \
  [ $rc -eq 2 -a -z "$(grep -F 'restarting the' "$TMP/mr2.err")" -a -n "$(grep -F 'not restarting' "$TMP/mr2.err")" ]
PPRUN --nnodes 2 true 2>/dev/null
check "--nnodes 2 without --master-addr/--master-port exits 2" [ $? -eq 2 ]

# Environment, prefixes, stdout and stderr apart, --log-dir, a last line without "\n".
PPRUN --nproc-per-node 3 --log-dir "$TMP/logs" bash -c \
  'echo "env $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT"
   echo "to-stderr $RANK" >&2; printf "no-newline"' >"$TMP/out" 2>"$TMP/err"
check "all ranks exit 0 -> pprun exits 0" [ $? -eq 0 ]
port=$(sed -n 's/^\[rank 0\] env .* 127\.0\.0\.1 \([0-9]*\)$/\1/p' "$TMP/out")
check "a MASTER_PORT was picked (${port:-none})" [ -n "$port" ]
for r in 0 1 2; do
  check "rank $r: environment" has_line "[rank $r] env $r $r 3 3 127.0.0.1 ${port:-x}" "$TMP/out"
  check "rank $r: stderr line on stderr" has_line "[rank $r] to-stderr $r" "$TMP/err"
  check "rank $r: partial last line" has_line "[rank $r] no-newline" "$TMP/out"
  check "rank $r: log file, stdout" has_line "env $r $r 3 3 127.0.0.1 ${port:-x}" \
    "$TMP/logs/rank_$r.log"
  check "rank $r: log file, stderr" has_line "to-stderr $r" "$TMP/logs/rank_$r.log"
done
# A fresh job token per job, the same on every rank; a caller's token is kept.
tok() { PPRUN --nproc-per-node 2 bash -c 'echo "tok $PPTRAIN_JOB_TOKEN"' | sed -n 's/^\[rank [01]\] tok //p' | sort -u; }
t1=$(tok); t2=$(tok)
check "every rank gets the same 64-hex-digit PPTRAIN_JOB_TOKEN" grep -qxE '[0-9a-f]{64}' <<<"$t1"
check "a new PPTRAIN_JOB_TOKEN per job" test -n "$t1" -a "$t1" != "$t2"
t3=$(PPTRAIN_JOB_TOKEN=mine-0123456789abcdef tok)
check "the caller's PPTRAIN_JOB_TOKEN is kept" [ "$t3" = mine-0123456789abcdef ]
check "no stderr line in stdout" lacks "to-stderr" "$TMP/out"
check "no stdout line in stderr" lacks "env" "$TMP/err"

# Whole lines only, even when two ranks write fast.
PPRUN --nproc-per-node 2 bash -c \
  'x=$(printf "x%.0s" {1..48}); for i in $(seq 1 3000); do echo "line $i $x"; done' >"$TMP/many"
good=$(grep -cE '^\[rank [01]\] line [0-9]+ x{48}$' "$TMP/many")
check "6000 whole lines ($good good of $(wc -l <"$TMP/many"))" \
  [ "$good" -eq 6000 -a "$(wc -l <"$TMP/many")" -eq 6000 ]

# A failing rank: its code propagates and the sleeping rank is stopped at once.
t0=$(now_ms)
PPRUN --nproc-per-node 2 --grace 3 bash -c \
  'if [ "$RANK" = 1 ]; then sleep 0.3; exit 7; fi; sleep 30' >/dev/null 2>"$TMP/err"
rc=$?
t=$(($(now_ms) - t0))
check "the failing rank's exit code 7 (got $rc)" [ $rc -eq 7 ]
check "the other rank stopped by SIGTERM ($t ms)" between "$t" 0 2500
check "a message names the failing rank" grep -q "rank 1 exited with code 7" "$TMP/err"

# A rank killed by a signal is the cause even when another rank's exit (its
# consequence) is seen first: rank 0 exits 1 just before rank 1 is SIGKILLed. The two
# meet through files (not sleeps: on a loaded machine the ranks start far apart), so
# rank 1 dies a few ms after rank 0's exit, well inside pprun's 0.2 s window.
rm -f "$TMP/ready" "$TMP/gone"
PPRUN --nproc-per-node 2 env SYNC="$TMP" bash -c \
  'wait_for() { for _ in $(seq 500); do [ -e "$1" ] && return; sleep 0.01; done; }
   if [ "$RANK" = 0 ]; then wait_for "$SYNC/ready"; touch "$SYNC/gone"; exit 1; fi
   touch "$SYNC/ready"; wait_for "$SYNC/gone"; kill -KILL $$' >/dev/null 2>&1
rc=$?
check "the SIGKILLed rank's code 137 wins (got $rc)" [ $rc -eq 137 ]

# A rank that ignores SIGTERM is killed after --grace.
t0=$(now_ms)
PPRUN --nproc-per-node 2 --grace 1 bash -c \
  'if [ "$RANK" = 0 ]; then sleep 0.3; exit 5; fi; trap "" TERM; sleep 30' >/dev/null 2>&1
rc=$?
t=$(($(now_ms) - t0))
check "exit code 5 with a rank ignoring SIGTERM (got $rc)" [ $rc -eq 5 ]
check "that rank SIGKILLed after --grace 1 ($t ms)" between "$t" 1000 3500

# SIGUSR1 and SIGTERM sent to pprun reach every rank; they exit 0, so does pprun.
"$PPRUN_BIN" --nproc-per-node 2 bash -c \
  'echo $$ >"$0/pid.$RANK"
   trap "echo got-USR1" USR1; trap "echo got-TERM; kill \$pid; exit 0" TERM
   echo ready; while :; do sleep 30 & pid=$!; wait $pid; done' "$TMP" >"$TMP/sig" 2>&1 &
pp=$!
wait_for() { # wait_for PATTERN COUNT: until COUNT lines of $TMP/sig match (5 s at most)
  for _ in $(seq 1 100); do
    [ "$(grep -c "$1" "$TMP/sig" 2>/dev/null)" -ge "$2" ] 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}
check "both ranks started" wait_for ready 2
kill -USR1 $pp
check "SIGUSR1 forwarded to both ranks" wait_for got-USR1 2
t0=$(now_ms)
kill -TERM $pp
for _ in $(seq 1 100); do kill -0 $pp 2>/dev/null || break; sleep 0.05; done
kill -0 $pp 2>/dev/null && kill -KILL $pp
wait $pp
rc=$?
t=$(($(now_ms) - t0))
check "SIGTERM forwarded to rank 0" has_line "[rank 0] got-TERM" "$TMP/sig"
check "SIGTERM forwarded to rank 1" has_line "[rank 1] got-TERM" "$TMP/sig"
check "ranks exiting 0 after SIGTERM -> pprun exits 0 (got $rc)" [ $rc -eq 0 ]
check "pprun finished $t ms after SIGTERM" between "$t" 0 2000

# The README's commands (Running on a cluster): pptrain on one node, and on two "nodes"
# (two pprun on this host, one rank each, sharing the token): the same losses.
PPTRAIN=${PPTRAIN:-./pptrain}
if [ -x "$PPTRAIN" ] && [ -e data/tiny/train.bin ]; then
  tiny=(--config configs/gpt-tiny.yaml --set train.steps=20 --set output.log_every=1)
  timeout 120 "$PPRUN_BIN" --nproc-per-node 2 "$PPTRAIN" "${tiny[@]}" --set output.dir="$TMP/one" >"$TMP/one.out" 2>&1
  check "pprun --nproc-per-node 2 ./pptrain (gpt-tiny): exit 0" [ $? -eq 0 ]
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  export PPTRAIN_JOB_TOKEN=$(openssl rand -hex 32 2>/dev/null || python3 -c "import secrets; print(secrets.token_hex(32))")
  for node in 0 1; do
    timeout 120 "$PPRUN_BIN" --nnodes 2 --node-rank $node --master-addr 127.0.0.1 --master-port "$port" \
      --nproc-per-node 1 "$PPTRAIN" "${tiny[@]}" --set output.dir="$TMP/nodes" >"$TMP/node$node.out" 2>&1 &
    eval "node${node}_pid=\$!"
  done
  wait "$node0_pid"; rc0=$?
  wait "$node1_pid"; rc1=$?
  unset PPTRAIN_JOB_TOKEN
  check "pprun --nnodes 2 (node ranks 0 and 1, one rank each): exit $rc0, $rc1" [ $rc0 -eq 0 -a $rc1 -eq 0 ]
  check "...losses equal the one-node run's bitwise" cmp -s <(cut -d, -f1,2 "$TMP/one/losses.csv") \
    <(cut -d, -f1,2 "$TMP/nodes/losses.csv" 2>/dev/null)
  # --max-restarts 1 with pptrain: rank 1 SIGKILLed after 300 steps or more; pprun
  # restarts both and --resume-if-present resumes from the last checkpoint (every 100)
  long=(--config test/configs/pipe8.yaml --set pipeline.stages=2 --set train.steps=1200
    --set train.lr_schedule.decay=constant --set output.checkpoint_every=100 --set runtime.timeout_s=10)
  timeout 120 "$PPRUN_BIN" --nproc-per-node 2 "$PPTRAIN" "${long[@]}" --set output.dir="$TMP/mref" >/dev/null 2>&1
  # kill_restarted NAME ROWS PPTRAIN-ARGS...: pprun --max-restarts 1 into $TMP/NAME, rank 1
  # SIGKILLed once it has ROWS losses; pprun's exit status
  kill_restarted() {
    local name=$1 rows=$2 pid victim=
    shift 2
    timeout 120 "$PPRUN_BIN" --nproc-per-node 2 --max-restarts 1 "$PPTRAIN" "$@" \
      --set output.dir="$TMP/$name" >"$TMP/$name.out" 2>&1 &
    pid=$!
    echo "$pid" >"$TMP/pid.$name" # its own group (timeout's): cleanup ends it
    wait_rows "$TMP/$name" "$rows" 60 && victim=$(rank_pid "$TMP/$name" 1)
    [ -n "$victim" ] && kill -KILL "$victim"
    wait "$pid"
  }
  kill_restarted mr 300 --resume-if-present "${long[@]}"
  rc=$?
  check "pprun --max-restarts 1, rank 1 killed: restarted, $(grep -o 'resumed from .* at step [0-9]*' "$TMP/mr.out" |
    sed 's/.* at //'), finished (rc $rc)" [ $rc -eq 0 -a -n "$(grep -F 'restarting the 2 ranks' "$TMP/mr.out")" \
    -a -n "$(grep 'resumed from .* at step [1-9]' "$TMP/mr.out")" ]
  check "...losses equal the uninterrupted run's bitwise" cmp -s <(cut -d, -f1,2 "$TMP/mref/losses.csv") \
    <(cut -d, -f1,2 "$TMP/mr/losses.csv" 2>/dev/null)
  # the same without --resume-if-present: the restart exits 2 saying what to add
  kill_restarted mrn 150 "${long[@]}"
  rc=$?
  check "...without --resume-if-present the restart exits 2 saying what to add (rc $rc)" [ $rc -eq 2 -a -n \
    "$(grep -F 'pprun restarted these ranks (PPRUN_RESTART_COUNT=1) without --resume-if-present: put it on' "$TMP/mrn.out")" ]
else
  echo "FAIL: $PPTRAIN or data/tiny/train.bin missing (make all data)" >&2
  failures=$((failures + 1))
fi

if [ $failures -ne 0 ]; then
  echo "pprun.sh: $failures failure(s)" >&2
  exit 1
fi
echo "pprun.sh: all passed"
