#!/usr/bin/env bash
# summary.sh — the run summary block at the end of a run (src/runtime/summary.c): printed
# once, by rank 0, with every field (steps, tokens, wall time, throughput, MFU, and per
# rank busy / bubble / transfer wait, peak memory, checkpoints and their stalls); its
# figures agree with the run (tokens = steps x batch x seq_len, the bubble of the timing
# report, the checkpoints saved); a resumed run counts its own steps; with data
# parallelism each rank line names its pipeline rank and replica.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-summary.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish

# run NAME NPROC [ARGS...]: pipe8 (batch 8 x seq_len 16 = 128 tokens a step) into $tmp/run
run() {
  local name=$1 n=$2
  shift 2
  timeout 120 scripts/pprun --nproc-per-node "$n" "$PPTRAIN" --config test/configs/pipe8.yaml \
    --set pipeline.stages=2 --set pipeline.microbatches=4 --set output.dir="$tmp/run-$name" \
    --set output.checkpoint_every=4 "$@" >"$tmp/$name.out" 2>&1 ||
    bad "the $name run failed: $(tail -n 3 "$tmp/$name.out")"
}
field() { sed -n -E "s/^\[rank 0\]   $2 +(.*)$/\1/p" "$tmp/$1.out"; } # NAME FIELD: its text

run pipe 2 --set train.steps=8
headers=$(grep -c 'run summary$' "$tmp/pipe.out")
[ "$headers" = 1 ] && grep -q '^\[rank 0\] run summary$' "$tmp/pipe.out" &&
  ok "one summary block, from rank 0" || bad "the summary block: $headers headers"
check "steps: $(field pipe steps)" '[ "$(field pipe steps)" = "1-8 of 8 (8 in this run)" ]'
check "tokens: $(field pipe tokens)" '[ "$(field pipe tokens)" = "1024 (128 a step)" ]'
check "wall time: $(field pipe 'wall time')" \
  'field pipe "wall time" | grep -Eq "^[0-9]+\.[0-9]{2} s "'
check "throughput: $(field pipe throughput)" \
  'field pipe throughput | grep -Eq "^[1-9][0-9]* tokens/s "'
check "MFU: $(field pipe MFU)" 'field pipe MFU | grep -q "^- (a GPU"'
shares='busy ([0-9.]+)%, bubble ([0-9.]+)% \(transfer wait ([0-9.]+)%\)'
rest='peak RSS [1-9][0-9.]* MB \| checkpoints 2, stalled [0-9.]+ ms \(longest [0-9.]+ ms\)'
for r in 0 1; do
  line=$(field pipe "rank $r")
  if [[ $line =~ ^step\ [0-9.]+\ ms:\ $shares\ \|\ $rest$ ]]; then
    busy=${BASH_REMATCH[1]} bubble=${BASH_REMATCH[2]} wait=${BASH_REMATCH[3]}
    # the timing report's line: "rank R: per step ... idle (bubble) X ms = B% | peak RSS ..."
    report=$(sed -n -E "s/^\[rank $r\] rank $r: per step .* \(bubble\) .* = ([0-9.]+)% .*/\1/p" \
      "$tmp/pipe.out")
    awk -v b="$busy" -v u="$bubble" -v w="$wait" \
      'BEGIN { exit !(b + u > 99.85 && b + u < 100.15 && w <= u + 0.1) }' &&
      [ "$bubble" = "$report" ] &&
      ok "rank $r: busy $busy% + bubble $bubble% = 100%, transfer wait $wait% within the \
bubble, which is the timing report's; 2 checkpoints with their stalls" ||
      bad "rank $r: busy $busy bubble $bubble wait $wait, the report's bubble '$report'"
  else
    bad "rank $r's line: '$line'"
  fi
done

# resumed from step 8 to 10: the summary counts this run's 2 steps
run pipe 2 --set train.steps=10 --resume
check "resumed: steps $(field pipe steps), tokens $(field pipe tokens)" \
  '[ "$(field pipe steps)" = "9-10 of 10 (2 in this run)" ] &&
   [ "$(field pipe tokens)" = "256 (128 a step)" ]'

# 2 stages x 2 replicas: each rank line names its pipeline rank and replica
run dp 4 --set train.steps=3
n=$(grep -cE '^\[rank 0\]   rank [0-3] \(pp [01], dp [01]\) +step ' "$tmp/dp.out")
check "2 stages x 2 replicas: 4 rank lines with pipeline rank and replica ($n)" '[ "$n" = 4 ]'
finish
