#!/usr/bin/env bash
# sample.sh — `pptrain sample` through the real binary (issue 27 item 4): greedy decoding
# (--temperature 0) gives transformers' generate(do_sample=False) ids for the goldens of
# test/sample/gen.py (GPT-2, Llama 3-style grouped-query attention, multi-query, qwen2,
# mistral, an end-of-text id met on the way; and text through a tokenizer); a checkpoint
# trained by pptrain samples via --checkpoint, the same as its Hugging Face export and as
# the sample train.sample_every printed from it while training, which left the losses as
# they were; a pipelined run says once why it prints none, and its checkpoint samples;
# seeds repeat, top-k 1 is greedy, model.max_seq_len stops the text; bad input exits 2
# naming it, printing nothing.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-sample.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish
[ -f data/tiny/train.bin ] || skip_all "no data/tiny/train.bin (make data)"
S() { "$PPTRAIN" sample --threads 1 "$@"; }
hex() { od -An -v -tx1 | tr -d ' \n'; }
unhex() { printf "$(sed 's/../\\x&/g' <<<"$1")"; }
count() { tr ',' '\n' <<<"$1" | grep -c .; } # ids in a comma-separated list
err() { tail -n1 "$tmp/err"; }

# 1. transformers' greedy continuations, id for id
n=0
while read -r name max prompt want gap eos; do
  case $name in '#'* | text) continue ;; esac
  got=$(S --init-from "test/hf/$name" --prompt-ids "$prompt" --max-new-tokens "$max" \
    --temperature 0 --ids ${eos:+--eos "$eos"} 2>"$tmp/err")
  n=$((n + 1))
  what="greedy $name, prompt of $(count "$prompt") ids${eos:+, end-of-text $eos}"
  [ "$got" = "$want" ] && ok "$what: transformers' $(count "$want") ids" ||
    bad "$what: got $got, transformers $want ($(err))"
done <test/sample/greedy.txt
check "greedy goldens: all 16 compared" "[ $n -eq 16 ]"
# text in, text out: the tokenizer's ids (its <|begin_of_text|> first), and the decode
TOK="--tokenizer test/tok/llama3.json"
while read -r tag name max phex want gap ohex; do
  [ "$tag" = text ] || continue
  prompt=$(unhex "$phex")
  ids=$(S --init-from "test/sample/$name" $TOK --prompt "$prompt" --max-new-tokens "$max" \
    --temperature 0 --ids 2>"$tmp/err")
  S --init-from "test/sample/$name" $TOK --prompt "$prompt" --max-new-tokens "$max" \
    --temperature 0 >"$tmp/text" 2>>"$tmp/err"
  text=$(head -c -1 "$tmp/text" | hex)
  [ "$ids" = "$want" ] && [ "$text" = "$ohex" ] &&
    ok "greedy text '$prompt': transformers' ids and decode" ||
    bad "greedy text '$prompt': ids $ids (want $want), text $(cat "$tmp/text") ($(err))"
done <test/sample/greedy.txt

# 2. the rule through the command: a seed repeats, top-k 1 is greedy, model.max_seq_len
#    stops the text, --eos none runs past the end-of-text id
g1="--init-from test/hf/llama3 --prompt-ids 1,2,3 --max-new-tokens 24 --ids"
a=$(S $g1 --seed 7 2>/dev/null) b=$(S $g1 --seed 7 2>/dev/null) c=$(S $g1 --seed 8 2>/dev/null)
check "sampling: seed 7 twice gives the same ids, seed 8 others" \
  "[ -n '$a' ] && [ '$a' = '$b' ] && [ '$a' != '$c' ]"
greedy=$(S $g1 --temperature 0 2>/dev/null)
topk1=$(S $g1 --top-k 1 --temperature 2 --seed 3 2>/dev/null)
check "top-k 1 at temperature 2 = greedy ($greedy)" "[ -n '$greedy' ] && [ '$topk1' = '$greedy' ]"
p60=$(seq 1 60 | tr '\n' ',' | sed 's/,$//')
got=$(S --init-from test/hf/gpt2 --prompt-ids "$p60" --max-new-tokens 10 --temperature 0 --ids \
  --eos none 2>"$tmp/err")
check "a prompt of 60 at max_seq_len 64: 4 new ids, stopped at model.max_seq_len" \
  "[ $(count "$got") -eq 4 ] && grep -q 'stopped at model.max_seq_len' '$tmp/err'"
set -- $(grep ' 78$' test/sample/greedy.txt)
got=$(S --init-from test/hf/gpt2 --prompt-ids "$3" --max-new-tokens "$2" --temperature 0 --ids \
  --eos none 2>/dev/null)
check "--eos none: past the end-of-text id, to --max-new-tokens" "[ $(count "$got") -eq $2 ]"

# 3. a checkpoint trained by pptrain (gpt-tiny, one process, 20 steps): its samples while
#    training are those of `pptrain sample --checkpoint` with the seed train.seed + step,
#    and the losses are a run's without samples
run() { # NAME [--set ...]
  local name=$1
  shift
  timeout 120 "$PPTRAIN" --config configs/gpt-tiny.yaml --set pipeline.stages=1 \
    --set train.steps=20 --set output.checkpoint_every=10 --set runtime.threads=1 \
    --set data.val=null --set output.dir="$tmp/$name" "$@" >"$tmp/$name.out" 2>&1
}
losses() { cut -d, -f1-4 "$1"; } # step, loss, lr, grad_norm: not the timings
if run s --set train.sample_every=10 && run plain; then
  check "train.sample_every 10: a sample after the checkpoints of steps 10 and 20" \
    "[ \$(grep -c '^sample after step' '$tmp/s.out') -eq 2 ] &&
     grep -q '^sample after step 20 ' '$tmp/s.out'"
  [ "$(losses "$tmp/s/losses.csv")" = "$(losses "$tmp/plain/losses.csv")" ] &&
    [ -s "$tmp/s/losses.csv" ] &&
    ok "losses with samples = without, bit for bit (losses.csv's loss, lr and norm)" ||
    bad "the samples changed the losses: $(diff <(losses "$tmp/s/losses.csv") \
      <(losses "$tmp/plain/losses.csv") | head -n 3)"
  sed -n '/^sample after step 20 /,/^rank 0: /p' "$tmp/s.out" | sed '1d;$d' >"$tmp/train20"
  ck="$tmp/s/checkpoints/latest"
  S --checkpoint "$ck" --prompt The --seed 1357 --max-new-tokens 64 >"$tmp/cli20" 2>"$tmp/err"
  cmp -s "$tmp/train20" "$tmp/cli20" &&
    ok "--checkpoint --seed 1357 prints the sample of step 20 ($(wc -c <"$tmp/cli20") bytes)" ||
    bad "--checkpoint's sample differs from training's: $(head -c 80 "$tmp/cli20") / \
$(head -c 80 "$tmp/train20") ($(err))"
  # with an end-of-text id (model.eos_token_id 32, the space: it comes soon) both stop there
  run e --set train.sample_every=10 --set model.eos_token_id=32 ||
    bad "gpt-tiny with eos: $(tail -n 3 "$tmp/e.out")"
  sed -n '/^sample after step 20 /,/^rank 0: /p' "$tmp/e.out" | sed '1d;$d' >"$tmp/etrain20"
  S --checkpoint "$tmp/e/checkpoints/latest" --prompt The --seed 1357 --max-new-tokens 64 \
    >"$tmp/ecli20" 2>"$tmp/err"
  check "model.eos_token_id 32: training's sample of step 20 stops at it as --checkpoint's does \
($(wc -c <"$tmp/ecli20") bytes, $(grep -o 'stopped at [a-z .-]*' "$tmp/err"))" \
    'cmp -s "$tmp/etrain20" "$tmp/ecli20" && grep -q "stopped at the end-of-text token" "$tmp/err"'
  PPTRAIN_HOST_STAGING=1 S --checkpoint "$ck" --prompt The --seed 1357 --max-new-tokens 64 \
    >"$tmp/staged" 2>/dev/null
  cmp -s "$tmp/staged" "$tmp/cli20" &&
    ok "the same through a device backend's path (PPTRAIN_HOST_STAGING=1)" ||
    bad "the staged CPU backend samples otherwise"
  "$PPTRAIN" export --checkpoint "$ck" --format hf --out "$tmp/hf" >/dev/null 2>&1
  x=$(S --checkpoint "$ck" --prompt "The cat" --temperature 0 --max-new-tokens 40 --ids 2>/dev/null)
  y=$(S --init-from "$tmp/hf" --prompt "The cat" --temperature 0 --max-new-tokens 40 --ids \
    2>/dev/null)
  check "greedy from the checkpoint = from its Hugging Face export (40 ids)" \
    "[ -n '$x' ] && [ '$x' = '$y' ]"
else
  bad "gpt-tiny runs failed: $(tail -n 3 "$tmp/s.out" "$tmp/plain.out")"
fi

# 4. a pipelined run (llama-tiny on 2 ranks) says once why it prints no sample; its
#    checkpoint samples
if timeout 120 scripts/pprun --nproc-per-node 2 "$PPTRAIN" --config configs/llama-tiny.yaml \
  --set train.steps=4 --set output.checkpoint_every=2 --set train.sample_every=2 \
  --set data.val=null --set output.dir="$tmp/pp" >"$tmp/pp.out" 2>&1; then
  check "2 ranks: 'no samples in this run' once, and no sample" \
    "[ \$(grep -c 'no samples in this run of 2 ranks (each rank holds' '$tmp/pp.out') -eq 1 ] &&
     ! grep -q 'sample after step' '$tmp/pp.out'"
  got=$(S --checkpoint "$tmp/pp/checkpoints" --prompt "A dog" --max-new-tokens 20 \
    --temperature 0 2>"$tmp/err")
  [ "${got:0:5}" = "A dog" ] && [ ${#got} -ge 10 ] && grep -q "model llama" "$tmp/err" &&
    ok "the pipelined llama checkpoint samples: 'A dog' and 20 bytes" ||
    bad "the pipelined llama checkpoint: '$got' ($(tail -n 2 "$tmp/err" | tr '\n' ' '))"
else
  bad "llama-tiny on 2 ranks failed: $(tail -n 3 "$tmp/pp.out")"
fi

# 5. bad input: exit 2, the argument named, nothing on stdout
refuse() { # WHAT PATTERN ARGS...
  local what=$1 pat=$2
  shift 2
  timeout 60 "$PPTRAIN" sample "$@" >"$tmp/out" 2>"$tmp/err" # 124: it hung
  local rc=$?
  [ $rc -eq 2 ] && [ ! -s "$tmp/out" ] && grep -q -- "$pat" "$tmp/err" &&
    ok "refused: $what (exit 2)" ||
    bad "$what: exit $rc, stdout $(head -c 60 "$tmp/out"), stderr $(head -n 2 "$tmp/err" |
      tr '\n' ' ')"
}
G="--init-from test/hf/gpt2"
L="--init-from test/sample/llama_tok"
refuse "an id outside the vocabulary" \
  "id 300 (number 2) is not in the model's vocabulary (ids 0..255)" \
  $G --prompt-ids 1,300 --max-new-tokens 2
refuse "a malformed id list" "id 2 is '', not a non-negative integer" \
  $G --prompt-ids 1,,2 --max-new-tokens 2
refuse "a prompt as long as max_seq_len" "the prompt has 64 tokens, and model.max_seq_len is 64" \
  $G --prompt-ids "$p60,1,2,3,4" --max-new-tokens 2
refuse "text without a tokenizer (vocabulary 800)" "needs --tokenizer FILE" \
  $L --prompt "hi" --max-new-tokens 2 --ids
refuse "text out without a tokenizer" "printing text needs --tokenizer" \
  $L --prompt-ids 1,2 --max-new-tokens 2
refuse "an end-of-text id outside the vocabulary" "--eos: id 256" \
  $G --prompt-ids 1 --max-new-tokens 2 --eos 256
refuse "no model" "give one model" --prompt-ids 1 --max-new-tokens 2
refuse "two models" "give one model" $G --checkpoint x --prompt-ids 1 --max-new-tokens 2
refuse "no prompt" "give one prompt" $G --max-new-tokens 2
refuse "no --max-new-tokens" "--max-new-tokens N is required" $G --prompt-ids 1
refuse "--top-p 0" "--top-p 0: expected a number in (0, 1]" \
  $G --prompt-ids 1 --max-new-tokens 2 --top-p 0
refuse "a negative temperature" "--temperature -1: expected a number" \
  $G --prompt-ids 1 --max-new-tokens 2 --temperature -1
refuse "--init-from a file" "not a directory" \
  --init-from test/sample/greedy.txt --prompt-ids 1 --max-new-tokens 2
refuse "--checkpoint of nothing" "$tmp/none" \
  --checkpoint "$tmp/none" --prompt-ids 1 --max-new-tokens 2
refuse "an unknown argument" "unknown argument '--bogus'" \
  $G --prompt-ids 1 --max-new-tokens 2 --bogus
# values the option parsing took whole before (strtoll, strtoull), or looped on ("" as a
# --device: strstr finds it everywhere)
refuse "an empty --device (it looped forever)" "--device : expected cpu, cuda or auto" \
  $G --prompt-ids 1 --max-new-tokens 2 --device ""
refuse "an empty --precision" "--precision : expected auto" \
  $G --prompt-ids 1 --max-new-tokens 2 --precision ""
refuse "--seed ' -1' (strtoull negated it)" "--seed  -1: expected an unsigned 64-bit integer" \
  $G --prompt-ids 1 --max-new-tokens 2 --seed " -1"
refuse "--top-k +5" "--top-k +5: expected an integer in \[0, 2147483647\]" \
  $G --prompt-ids 1 --max-new-tokens 2 --top-k +5
refuse "--prompt-ids ' 1'" "id 1 is ' 1', not a non-negative integer" \
  $G --prompt-ids " 1" --max-new-tokens 2
refuse "17 --eos ids (16 were kept, silently)" "--eos: 17 ids, over the 16" \
  $G --prompt-ids 1 --max-new-tokens 2 --eos 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17
refuse "a missing --tokenizer, named" "sample: cannot open tokenizer file '$tmp/none.json'" \
  $G --prompt-ids 1 --max-new-tokens 2 --tokenizer "$tmp/none.json"
# generation_config.json: only the keys generation reads (eos_token_id) are checked; a
# model key there of any type is ignored, as transformers' GenerationConfig ignores it
mkdir -p "$tmp/gc" && cp test/hf/gpt2/config.json test/hf/gpt2/model.safetensors "$tmp/gc/"
printf '{"eos_token_id": 7, "vocab_size": "x", "num_hidden_layers": null, "n_embd": [1],
  "rope_scaling": 5, "rope_parameters": {"a": {}}, "model_type": 3, "architectures": "x",
  "bos_token_id": "y", "torch_dtype": 1.5, "pad_token_id": {}}\n' >"$tmp/gc/generation_config.json"
S --init-from "$tmp/gc" --prompt-ids 1,2 --max-new-tokens 2 --ids >"$tmp/out" 2>"$tmp/err" &&
  grep -qF "end of text: 7 from $tmp/gc/generation_config.json's eos_token_id" "$tmp/err" &&
  ok "generation_config.json with model keys of other types (vocab_size \"x\", ...): ignored, its eos_token_id 7 taken" ||
  bad "generation_config.json with model keys of other types: $(tail -n 2 "$tmp/err" | tr '\n' ' ')"
printf '{"eos_token_id": "7", "vocab_size": "x"}\n' >"$tmp/gc/generation_config.json"
refuse "generation_config.json's eos_token_id \"7\"" \
  "$tmp/gc/generation_config.json: eos_token_id is a string, expected an integer or a list of integers" \
  --init-from "$tmp/gc" --prompt-ids 1 --max-new-tokens 2
printf '{"eos_token_id": [1, null]}\n' >"$tmp/gc/generation_config.json"
refuse "generation_config.json's eos_token_id [1, null]" \
  "$tmp/gc/generation_config.json: eos_token_id\[1\] is null, expected an integer" \
  --init-from "$tmp/gc" --prompt-ids 1 --max-new-tokens 2
# a temperature that underflows (strtod's ERANGE) is a tiny one: greedy, as 0 is
t0=$("$PPTRAIN" sample $G --prompt-ids 1,2 --max-new-tokens 4 --ids --temperature 0 2>/dev/null)
tiny=$("$PPTRAIN" sample $G --prompt-ids 1,2 --max-new-tokens 4 --ids --temperature 4.9e-324 2>/dev/null)
[ -n "$t0" ] && [ "$tiny" = "$t0" ] && ok "--temperature 4.9e-324 (underflow) samples greedily" ||
  bad "--temperature 4.9e-324: '$tiny' vs greedy '$t0'"
finish
