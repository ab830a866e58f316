#!/usr/bin/env bash
# prepare.sh — `pptrain prepare-data` as a command (issue 27, item 2; test_prepare.c checks
# the ids, the val rule and bad records in process). A JSONL corpus of several batches
# (about 6 MB, bench/gen_corpus.sh) gives the same files byte for byte with 1 and 3
# encoding threads, in shards of exactly --shard-tokens tokens; a bad tokenizer.json exits 2
# and writes nothing; SIGINT and SIGTERM midway (the input an endless stream on standard
# input, so the signal lands while shards are being written, whatever the machine's speed;
# and a stream that stops and stays open, so it lands while prepare-data waits for input,
# where it must not wait for more) remove every file the run wrote, leave an older file under
# a final name as it was, and the process dies of the signal. Text in, training out (issue
# 27's "must show"): a JSONL corpus through the GPT-2-style tokenizer into shards, trained on
# by a glob of them on 2 pipeline ranks, checkpointed past a shard boundary and resumed: the
# losses of the run that never stopped, bit for bit, across the next boundary.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-prepare.XXXXXX)
gen=
trap '[ -z "$gen" ] || kill "$gen" 2>/dev/null; rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish

tok=test/tok/llama3.json
bash bench/gen_corpus.sh 6 >"$tmp/c.jsonl" || bad "bench/gen_corpus.sh failed"

# 1. Several batches, 1 and 3 threads: the same bytes; shards of exactly N tokens.
N=500000
for t in 1 3; do
  timeout 300 "$PPTRAIN" prepare-data --tokenizer $tok --jsonl "$tmp/c.jsonl" --field text \
    --out "$tmp/t$t/c.bin" --shard-tokens $N --val-fraction 0.05 --threads $t \
    >"$tmp/t$t.out" 2>&1 || bad "--threads $t: exit $?: $(tail -n 3 "$tmp/t$t.out")"
done
ntrain=$(ls "$tmp/t1" | grep -c '^c_train_[0-9]\{6\}\.bin$')
check "--threads 1 and 3 write the same $(ls "$tmp/t1" | wc -l) files, byte for byte" \
  '[ "$ntrain" -ge 3 ] && [ -e "$tmp/t1/c_val_000000.bin" ] &&
   diff -r "$tmp/t1" "$tmp/t3" >/dev/null'
full=$((1024 + 2 * N)) sizes=ok
for k in $(seq 0 $((ntrain - 2))); do
  [ "$(stat -c %s "$tmp/t1/$(printf 'c_train_%06d.bin' "$k")")" = $full ] || sizes="shard $k"
done
check "every train shard but the last holds $N tokens ($sizes)" '[ $sizes = ok ]'
last=$(printf %06d $((ntrain - 1)))
check "one line per split and the throughput on stdout" \
  'grep -q "to $ntrain files .*c_train_000000.bin .. .*c_train_$last.bin" "$tmp/t1.out" &&
   grep -q "MB of text, [0-9]* tokens in .* MB/s, .* tokens/s (3 threads)" "$tmp/t3.out"'

# 2. A tokenizer.json that is not JSON: exit 2, the file named, nothing written.
mkdir "$tmp/bad" && printf '{"model": ' >"$tmp/bad/tok.json"
"$PPTRAIN" prepare-data --tokenizer "$tmp/bad/tok.json" --jsonl "$tmp/c.jsonl" --field text \
  --out "$tmp/bad/o.bin" >"$tmp/bad.out" 2>&1
rc=$?
check "a malformed tokenizer.json: exit 2, nothing written ($(head -c 99 "$tmp/bad.out"))" \
  '[ $rc = 2 ] && grep -q "tok.json: not valid JSON" "$tmp/bad.out" &&
   [ "$(ls "$tmp/bad")" = tok.json ]'

# 3. Stopped midway by SIG: a JSONL stream on stdin, from a producer the test kills by its
#    PID; once shards are finished (.part files), the signal. MODE stream: endless, so the
#    signal lands while shards are being written. MODE idle: 2.5 MB (two batches and part of
#    a third), then the producer sleeps with the pipe open: prepare-data writes the batches
#    it has while it waits for the rest, and the signal lands while it waits; it must act on
#    it within 2 s, not when the input ends. (Until it read with poll and read(2), it read
#    with fread, a batch at a time, and both waited for the input.) Exit status 128 + the
#    signal's number; the directory holds only the old file, unchanged.
interrupt() { # SIG NUMBER MODE PREPARE-DATA-INPUT-ARGS...
  local sig=$1 num=$2 mode=$3 d=$tmp/int-$1-$3 limit=1500 parts_wait=6000
  shift 3
  mkdir "$d" && printf old >"$d/s_train_000000.bin" && mkfifo "$d.fifo"
  local records='{ printf "{\"text\": \"the apple %d in the garden\"}\n", i }'
  if [ "$mode" = stream ]; then
    awk "BEGIN { for (i = 0;; i++) $records }" >"$d.fifo" &
  else
    limit=100 # 2 s
    (awk "BEGIN { for (i = 0; i < 60000; i++) $records }" && : >"$d.sent" &&
      exec sleep 60) >"$d.fifo" &
  fi
  gen=$!
  "$PPTRAIN" prepare-data "$@" --out "$d/s" --shard-tokens 100000 <"$d.fifo" >"$d.out" 2>&1 &
  local pid=$! waited=0
  if [ "$mode" = idle ]; then # all sent; then 2 s for the shards of what came
    for waited in $(seq 500); do [ -e "$d.sent" ] && break; sleep 0.02; done
    waited=0 parts_wait=100
  fi
  until ls "$d"/*.part >/dev/null 2>&1 || ! kill -0 $pid 2>/dev/null; do
    sleep 0.02
    waited=$((waited + 1))
    [ $waited -lt $parts_wait ] || break
  done
  [ "$mode" = stream ] || sleep 0.3 # the rest of what came written: waiting for input
  local parts; parts=$(ls "$d" | grep -c '\.part$')
  local t0; t0=$(date +%s%N)
  kill -"$sig" $pid
  for waited in $(seq $limit); do kill -0 $pid 2>/dev/null || break; sleep 0.02; done
  local ms=$((($(date +%s%N) - t0) / 1000000))
  kill -KILL $pid 2>/dev/null # (a run that ignored the signal fails the check below)
  wait $pid
  local rc=$?
  kill $gen 2>/dev/null
  wait $gen 2>/dev/null
  gen=
  check "SIG$sig ($mode input, ${*:1:2}) after $parts finished shards: exit $rc in $ms ms, \
all it wrote removed, the old file kept" \
    '[ $rc = $((128 + num)) ] && [ "$parts" -ge 1 ] && [ $ms -le $((limit * 20)) ] &&
     [ "$(ls "$d")" = s_train_000000.bin ] && [ "$(cat "$d/s_train_000000.bin")" = old ] &&
     grep -q "stopped by .*: nothing written" "$d.out"'
}
jsonl="--tokenizer $tok --jsonl - --field text --val-fraction 0.1 --threads 2"
interrupt INT 2 stream $jsonl
interrupt TERM 15 stream $jsonl
interrupt INT 2 idle $jsonl
interrupt TERM 15 idle --text - --threads 2 # byte-level: chunks of standard input

# 4. Text in, training out: shards of 2000 tokens (15 batches of 8 x 16 each), a 2-rank
#    pipelined run of 40 steps, checkpointed at 20 (in the second shard) and resumed.
j=$tmp/text
head -n 40 "$tmp/c.jsonl" >"$tmp/small.jsonl"
"$PPTRAIN" prepare-data --tokenizer test/tok/gpt2.json --jsonl "$tmp/small.jsonl" --field text \
  --out "$j/c" --shard-tokens 2000 --val-fraction 0.01 >"$j.prep" 2>&1 ||
  bad "prepare-data for training: $(tail -n 3 "$j.prep")"
# train NAME [ARGS...]: 2 ranks on the shards, output.dir $j/NAME
train() {
  local name=$1; shift
  timeout 120 scripts/pprun --nproc-per-node 2 "$PPTRAIN" --config test/configs/pipe8.yaml \
    --set pipeline.stages=2 --set pipeline.microbatches=4 --set model.vocab_size=700 \
    --set data.train="$j/c_train_*.bin" --set train.steps=40 --set output.dir="$j/$name" \
    --set output.checkpoint_every=20 "$@" >"$j/$name.out" 2>&1 ||
    bad "train $name: $(tail -n 3 "$j/$name.out")"
}
train full
# the first 20 steps (the rows and checkpoint of the run after them removed), then the resume
cp -r "$j/full" "$j/res" && rm -r "$j/res/checkpoints/step_0000040" &&
  head -n 21 "$j/full/losses.csv" >"$j/res/losses.csv"
train res --resume "$j/res/checkpoints/step_0000020"
losses() { tail -n +2 "$j/$1/losses.csv" | cut -d, -f1,2 | sed -n 21,40p; }
check "JSONL -> $(ls "$j" | grep -c '_train_') shards -> 2 ranks, resumed at step 20 (a boundary at \
30): steps 21-40 bitwise equal" \
  '[ "$(losses full | wc -l)" = 20 ] && [ "$(losses full)" = "$(losses res)" ] &&
   grep -q "shard=1 " "$j/res/checkpoints/step_0000020/manifest"'

finish
