#!/usr/bin/env bash
# stopself.sh — a 2-stage pptrain job whose rank 1 is stopped (SIGSTOP) for 3 timeouts
# mid-training and then continued (SIGCONT): rank 0 fails naming rank 1 first, and rank
# 1's own message says that it was itself stopped or too slow, naming itself first
# rather than the live rank 0 (issue 25, section 3; [Note: stopped] in
# src/comm/comm_socket_blame.c). The ranks are started by hand (test/lib/ranks.sh), so that
# nothing but this test signals the stopped rank.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
T=1 # runtime.timeout_s
tmp=$(mktemp -d /tmp/pptrain-stopself.XXXXXX)
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
port=$(free_port)
for r in 0 1; do
  start_rank $r 2 "$port" --config configs/gpt-tiny.yaml --set pipeline.stages=2 \
    --set train.steps=100000 --set output.log_every=1 --set data.val_every=0 \
    --set runtime.timeout_s=$T --set output.dir="$tmp/run"
done
for _ in $(seq 600); do grep -qE '^step +[0-9]' "$tmp/r0.out" "$tmp/r1.out" && break; sleep 0.05; done
sleep 0.3
kill -STOP "${pids[1]}"
sleep $((3 * T))
kill -CONT "${pids[1]}"
for _ in $(seq 300); do # both end within 30 s
  kill -0 "${pids[0]}" 2>/dev/null || kill -0 "${pids[1]}" 2>/dev/null || break
  sleep 0.1
done
wait "${pids[0]}"; rc0=$?
wait "${pids[1]}"; rc1=$?
pids=()
# The first error line of rank $1, and the first rank it names after "error: ".
err() { grep -m1 'error: ' "$tmp/r$1.out"; }
first_named() { err "$1" | sed -E 's/^.*error: //' | grep -oE 'rank [0-9]+' | head -n1 | cut -d' ' -f2; }
check "no sanitizer report" "! grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' $tmp/r0.out $tmp/r1.out"
check "rank 0 exits non-zero ($rc0) naming rank 1 first: $(err 0)" '[ $rc0 -ne 0 ] && [ "$(first_named 0)" = 1 ]'
# (the message may first say where it was, e.g. "summing tied embedding gradients with rank 0: ")
check "rank 1, stopped, exits non-zero ($rc1) saying so: $(err 1)" \
  '[ $rc1 -ne 0 ] && err 1 | grep -q "rank 1 (this rank) was itself stopped or too slow"'
finish
