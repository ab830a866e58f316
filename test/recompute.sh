#!/usr/bin/env bash
# recompute.sh — pipeline.recompute through the binary over real sockets: none,
# selective and full train the same bits (losses and final weights) for gpipe, 1f1b and
# interleaved on 2 and 4 ranks; each rank's build report ("allocated:") equals the
# memory plan `pptrain schedule` prints for the same config ([Note: memory plan]); and
# the recompute count the runtime checks every step is the plan's. Llama's block too
# (test/configs/llama8.yaml), on 1f1b, zbv and 4 ranks.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-recompute.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish
cfg=test/configs/pipe8.yaml
common=(--set train.steps=4 --set output.log_every=1 --set data.val=data/tiny/val.bin --set data.val_every=2
        --set data.val_batches=1)

# run NAME P [--set ...]: train into $tmp/NAME; losses in $tmp/NAME.loss, weights $tmp/NAME.bin
run() {
  local name=$1 P=$2; shift 2
  timeout 120 scripts/pprun --nproc-per-node "$P" "$PPTRAIN" --config "$cfg" --set pipeline.stages="$P" \
    --set output.dir="$tmp/$name" "${common[@]}" "$@" >"$tmp/$name.out" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then bad "$name exited $rc: $(tail -n 5 "$tmp/$name.out")"; return 1; fi
  tail -n +2 "$tmp/$name/losses.csv" | cut -d, -f2 >"$tmp/$name.loss"
  # the llama family has no llm.c format: the gradient norm of each step stands for its
  # weights (every weight of every stage enters it)
  if grep -q '^  arch: llama' "$cfg"; then
    tail -n +2 "$tmp/$name/losses.csv" | cut -d, -f4 >"$tmp/$name.bin"
  else
    "$PPTRAIN" export --checkpoint "$tmp/$name/checkpoints" --out "$tmp/$name.bin" >/dev/null
  fi
}
same() {
  local what=weights; grep -q '^  arch: llama' "$cfg" && what="gradient norms"
  if [ -s "$tmp/$1.loss" ] && cmp -s "$tmp/$1.loss" "$tmp/$2.loss" && cmp -s "$tmp/$1.bin" "$tmp/$2.bin"; then
    ok "$2 == $1 (losses and $what bitwise)"
  else bad "$2 != $1: $(paste -d' ' "$tmp/$1.loss" "$tmp/$2.loss" | head -n 2 | tr '\n' ';')"; fi
}
# plan NAME P [--set ...]: the build report's allocation equals `pptrain schedule`'s plan
plan() {
  local name=$1 P=$2; shift 2
  "$PPTRAIN" schedule --config "$cfg" --set pipeline.stages="$P" "${common[@]}" "$@" >"$tmp/$name.plan" 2>&1 ||
    { bad "$name: pptrain schedule failed: $(tail -n 3 "$tmp/$name.plan")"; return; }
  local want got
  want=$(grep -o 'rank [0-9]*: plan: .*' "$tmp/$name.plan" | sed 's/: plan: /: /' | sort)
  got=$(grep -o 'rank [0-9]*: allocated: .*' "$tmp/$name.out" | sed 's/: allocated: /: /' | sort)
  if [ -n "$want" ] && [ "$(echo "$want" | wc -l)" -eq "$P" ] && [ "$want" = "$got" ]; then
    ok "$name: allocated = planned on all $P ranks"
  else bad "$name: plan and allocation differ: $(diff <(echo "$want") <(echo "$got") | head -n 4 | tr '\n' ';')"; fi
}

for P in 2 4; do
  for sched in gpipe 1f1b interleaved-1f1b; do
    v=1; [ $sched = interleaved-1f1b ] && v=2
    set_=(--set pipeline.schedule=$sched --set pipeline.virtual_stages=$v --set pipeline.microbatches=4)
    for rc in none selective full; do
      run "$sched-P$P-$rc" "$P" "${set_[@]}" --set pipeline.recompute=$rc || continue
      plan "$sched-P$P-$rc" "$P" "${set_[@]}" --set pipeline.recompute=$rc
      [ $rc != none ] && same "$sched-P$P-none" "$sched-P$P-$rc"
    done
  done
done
# the first layer of each chunk only, and a zero-bubble schedule with its W state
run 1f1b-P2-full1 2 --set pipeline.microbatches=4 --set pipeline.recompute=full --set pipeline.recompute_layers=1 &&
  same 1f1b-P2-none 1f1b-P2-full1 && plan 1f1b-P2-full1 2 --set pipeline.microbatches=4 --set pipeline.recompute=full \
  --set pipeline.recompute_layers=1
run zbv-P2-sel 2 --set pipeline.schedule=zbv --set pipeline.virtual_stages=2 --set pipeline.microbatches=4 \
  --set pipeline.recompute=selective && same 1f1b-P2-none zbv-P2-sel &&
  plan zbv-P2-sel 2 --set pipeline.schedule=zbv --set pipeline.virtual_stages=2 --set pipeline.microbatches=4 \
  --set pipeline.recompute=selective
# 1F1B's last stage keeps every forward: it recomputes nothing
if grep -q "rank 1: recompute: per step 0 layer recomputes, [1-9][0-9]* skipped" "$tmp/1f1b-P2-full.out" &&
   grep -q "rank 0: recompute: per step [1-9][0-9]* layer recomputes, 0 skipped" "$tmp/1f1b-P2-full.out"; then
  ok "1f1b P=2 full: the last stage skips every recompute, the first skips none"
else bad "1f1b P=2 full: $(grep 'recompute:' "$tmp/1f1b-P2-full.out" | tr '\n' ';')"; fi
# Llama's block: the same bits under every mode, split backward (zbv) included; the
# allocation is the plan
cfg=test/configs/llama8.yaml
for sched in "1f1b 1 2" "zbv 2 2" "1f1b 1 4"; do
  set -- $sched
  set_=(--set pipeline.schedule=$1 --set pipeline.virtual_stages=$2 --set pipeline.microbatches=4)
  for rc in none selective full; do
    run "llama-$1-P$3-$rc" "$3" "${set_[@]}" --set pipeline.recompute=$rc || continue
    plan "llama-$1-P$3-$rc" "$3" "${set_[@]}" --set pipeline.recompute=$rc
    [ $rc != none ] && same "llama-$1-P$3-none" "llama-$1-P$3-$rc"
  done
done
cfg=test/configs/pipe8.yaml

# a bad value is refused with the choices
if "$PPTRAIN" schedule --config "$cfg" --set pipeline.recompute=some >"$tmp/bad.out" 2>&1; then
  bad "pipeline.recompute=some accepted"
elif grep -q "none, selective, full" "$tmp/bad.out"; then ok "pipeline.recompute=some refused with the choices"
else bad "pipeline.recompute=some: $(head -c 300 "$tmp/bad.out")"; fi

# pipeline.balance: memory weighs what each rank's device stores ([Note: backend layout]):
# ranks that store differently split the layers differently, which the ranks compare and
# refuse ([Note: partition agreement] in runtime.c). Here rank 1 alone computes the head
# in 1-row chunks (PPTRAIN_LOGITS_CHUNK_ROWS, as a card of other memory would), which moves
# the memory balance from layers 0-4 | 5-7 to 0-2 | 3-7 at this shape.
printf '#!/bin/sh\n[ "$RANK" = 1 ] && export PPTRAIN_LOGITS_CHUNK_ROWS=1\nexec "%s" "$@"\n' "$(realpath "$PPTRAIN")" \
  >"$tmp/rank1.sh"
chmod +x "$tmp/rank1.sh"
mixed=(--config configs/gpt-tiny.yaml --set runtime.device=cpu --set pipeline.balance=memory --set model.n_layers=8
       --set model.vocab_size=8192 --set train.batch_size=32 --set train.steps=2 --set data.val=null)
rc=0
timeout 120 scripts/pprun --nproc-per-node 2 "$tmp/rank1.sh" "${mixed[@]}" --set output.dir="$tmp/mixed" \
  >"$tmp/mixed.out" 2>&1 || rc=$?
if [ $rc -eq 2 ] && grep -q "the ranks split the layers differently (this rank ends stage 0 at layer [35]" "$tmp/mixed.out" &&
   grep -q "give pipeline.split" "$tmp/mixed.out"; then
  ok "balance: memory on ranks that store differently: exit 2, the ranks split the layers differently"
else bad "ranks with different partitions (rc=$rc): $(grep -m2 'error' "$tmp/mixed.out")"; fi
timeout 120 scripts/pprun --nproc-per-node 2 "$tmp/rank1.sh" "${mixed[@]}" --set 'pipeline.split=[5, 3]' \
  --set output.dir="$tmp/mixed2" >"$tmp/mixed2.out" 2>&1 &&
  ok "... and with pipeline.split given they train" || bad "pipeline.split given: $(tail -n 3 "$tmp/mixed2.out")"

[ $pass -ge 47 ] || bad "only $pass checks ran (at least 47 expected)"
finish
