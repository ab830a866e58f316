#!/usr/bin/env bash
# hf.sh — Hugging Face model directories through the real binary (issue 26 items 3, 4):
# test/hf/gpt2 (transformers' save_pretrained of a tiny GPT2LMHeadModel) imported on 1,
# 2 and 4 pipeline ranks gives transformers' loss (test/hf/loss.txt, from
# test/hf/gen_gpt2.py) and each rank reads only its share; the Hub's layout (gpt2_hub:
# no prefix, mask buffers, fp16, an index); import -> export at fp32 gives the input's
# model.safetensors byte for byte; bf16 and sharded exports read back; damaged or
# mismatched inputs exit 2 naming the file and the tensor or key, and write nothing.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-hf.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish
HF=test/hf/gpt2
[ -f data/tiny/train.bin ] || skip_all "no data/tiny/train.bin (make data)"

# The model keys come from config.json: the config names none of them. The vocabulary
# (256) is padded to 384 rows, which the export drops again.
cat >"$tmp/hf.yaml" <<EOF
model:
  init_from: $HF
  padded_vocab_size: 384
pipeline:
  microbatches: 4
train:
  batch_size: 4
  seq_len: 32
  steps: 1
data:
  train: data/tiny/train.bin
runtime:
  threads: 1
  timeout_s: 60
EOF

# run NAME P [--set ...]: output.dir $tmp/NAME, its output in $tmp/NAME.out
run() {
  local name=$1 P=$2; shift 2
  timeout 120 scripts/pprun --nproc-per-node "$P" "$PPTRAIN" --config "$tmp/hf.yaml" \
    --set pipeline.stages="$P" --set output.dir="$tmp/$name" "$@" >"$tmp/$name.out" 2>&1
}
loss() { sed -n 2p "$tmp/$1/losses.csv" | cut -d, -f2; }
want() { awk -v k="$1" '$1 == k { print $2 }' test/hf/loss.txt; }
near() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= t) }'; }
# the bytes a rank's build report says it read, and the directory's total
reads() { sed -n "s/.*rank $2: model.init_from .*: read \([0-9]*\) of the directory's \([0-9]*\) tensor bytes.*/\1 \2/p" "$tmp/$1.out"; }

# 1. Import on 1, 2 and 4 pipeline ranks: transformers' loss (1e-5), equal across
#    splits, and every rank of a split reads less than the whole directory.
ref=$(want gpt2)
for P in 1 2 4; do
  if ! run "p$P" $P; then bad "import on $P ranks: $(tail -n 3 "$tmp/p$P.out")"; continue; fi
  l=$(loss "p$P")
  if near "$l" "$ref" 1e-5; then ok "import on $P rank(s): loss $l = transformers' $ref (1e-5)"; else bad "import on $P rank(s): loss $l, transformers' $ref"; fi
  share=1
  for ((r = 0; r < P; r++)); do
    set -- $(reads "p$P" $r)
    if [ $# -ne 2 ] || [ "$1" -le 0 ] || { [ $P -eq 1 ] && [ "$1" -ne "$2" ]; } || { [ $P -gt 1 ] && [ "$1" -ge "$2" ]; }; then
      share=0; echo "   rank $r of $P read: ${1:-?} of ${2:-?}"; fi
  done
  [ $P -eq 1 ] && check "1 rank reads every tensor byte, once ($(reads p1 0))" "[ $share -eq 1 ]"
  [ $P -gt 1 ] && check "$P ranks: each reads only its stages' share ($(for ((r = 0; r < P; r++)); do reads "p$P" $r | cut -d' ' -f1; done | tr '\n' ' ')of $(reads p1 0 | cut -d' ' -f2) bytes)" "[ $share -eq 1 ]"
done
l1=$(loss p1)
check "the losses of 2 and 4 ranks equal 1 rank's (1e-6): $(loss p2) $(loss p4)" 'near "$(loss p2)" "$l1" 1e-6 && near "$(loss p4)" "$l1" 1e-6'

# 2. The Hub's layout: names without "transformer.", h.N.attn.bias and masked_bias
#    buffers (never read), fp16 weights, two shards and an index.
run hub 2 --set model.init_from=test/hf/gpt2_hub || bad "gpt2_hub: $(tail -n 3 "$tmp/hub.out")"
check "the Hub's layout (no prefix, mask buffers, fp16, index) on 2 ranks: loss $(loss hub) = transformers' $(want gpt2_hub) (1e-5)" 'near "$(loss hub)" "$(want gpt2_hub)" 1e-5'

# 3. Import -> 0 steps -> export at fp32: the input's model.safetensors byte for byte.
run zero 2 --set train.steps=0 || bad "steps 0: $(tail -n 3 "$tmp/zero.out")"
"$PPTRAIN" export --checkpoint "$tmp/zero/checkpoints/latest" --format hf --out "$tmp/x32" >"$tmp/x32.log" 2>&1 || bad "export fp32: $(cat "$tmp/x32.log")"
check "import -> export at fp32: model.safetensors byte-identical to transformers' save_pretrained" 'cmp -s "$tmp/x32/model.safetensors" "$HF/model.safetensors"'
check "the export's config.json: gpt2, vocab_size 256 (not the padded 384), 4 layers, tied" \
  'grep -q "\"model_type\": \"gpt2\"" "$tmp/x32/config.json" && grep -q "\"vocab_size\": 256$" "$tmp/x32/config.json" && grep -q "\"n_layer\": 4," "$tmp/x32/config.json" && grep -q "\"tie_word_embeddings\": true" "$tmp/x32/config.json" && grep -q "GPT2LMHeadModel" "$tmp/x32/config.json"'
check "the export's config.json keeps the directory's token ids (bos and eos 255)" \
  'grep -q "\"bos_token_id\": 255," "$tmp/x32/config.json" && grep -q "\"eos_token_id\": 255," "$tmp/x32/config.json"'
"$PPTRAIN" sample --checkpoint "$tmp/zero/checkpoints/latest" --prompt-ids 1,2 --max-new-tokens 2 \
  --ids >/dev/null 2>"$tmp/sample.log"
check "sample of the checkpoint stops at its run's model.eos_token_id ($(grep -o 'end of text: .*' "$tmp/sample.log"))" \
  'grep -q "end of text: 255 from model.eos_token_id" "$tmp/sample.log"'
run ids 1 --set train.steps=0 --set model.eos_token_id=[3,255] --set model.bos_token_id=null ||
  bad "token ids set: $(tail -n 3 "$tmp/ids.out")"
"$PPTRAIN" export --checkpoint "$tmp/ids/checkpoints/latest" --format hf --out "$tmp/xids" >/dev/null 2>&1 ||
  bad "export with token ids set"
check "ids the config sets win over config.json's: eos [3, 255] exported as a list, no bos" \
  'tr -d " \n" <"$tmp/xids/config.json" | grep -q "\"eos_token_id\":\[3,255\]" && ! grep -q bos_token_id "$tmp/xids/config.json"'
run back 1 --set model.init_from="$tmp/x32" || bad "re-import: $(tail -n 3 "$tmp/back.out")"
check "the export imports again to the same loss bit for bit" '[ -n "$l1" ] && [ "$(loss back)" = "$l1" ]'

# 4. bf16: the file holds BF16 and reads back within bf16 rounding.
"$PPTRAIN" export --checkpoint "$tmp/zero/checkpoints/latest" --format hf --out "$tmp/x16" --dtype bf16 >/dev/null 2>&1 || bad "export bf16"
check "--dtype bf16 writes BF16 tensors and torch_dtype bfloat16" 'head -c 4000 "$tmp/x16/model.safetensors" | grep -aq "\"dtype\":\"BF16\"" && ! head -c 4000 "$tmp/x16/model.safetensors" | grep -aq "\"F32\"" && grep -q bfloat16 "$tmp/x16/config.json"'
check "bf16 export: about half the bytes" '[ $(stat -c %s "$tmp/x16/model.safetensors") -lt $(( $(stat -c %s "$tmp/x32/model.safetensors") / 2 + 8192 )) ]'
run b16 1 --set model.init_from="$tmp/x16" || bad "bf16 import: $(tail -n 3 "$tmp/b16.out")"
check "bf16 export read back: loss $(loss b16) within 2e-3 of fp32's $l1 (transformers: 3e-4 apart)" 'near "$(loss b16)" "$l1" 2e-3'

# 5. Sharded: --max-shard-size 60KB cuts 244 KB into shards with an index; the shards
#    import to the fp32 loss bit for bit, 2 ranks reading their share.
"$PPTRAIN" export --checkpoint "$tmp/zero/checkpoints/latest" --format hf --out "$tmp/xs" --max-shard-size 60KB >/dev/null 2>&1 || bad "sharded export"
nsh=$(ls "$tmp/xs" | grep -c '^model-0000[0-9]-of-0000[0-9].safetensors$')
check "--max-shard-size 60KB: $nsh shards, each at most 60000 tensor bytes, an index with total_size, no model.safetensors" \
  '[ "$nsh" -ge 4 ] && [ -f "$tmp/xs/model.safetensors.index.json" ] && [ ! -e "$tmp/xs/model.safetensors" ] && grep -q "\"total_size\": 244480" "$tmp/xs/model.safetensors.index.json" && [ $(ls -l "$tmp"/xs/model-*.safetensors | awk "\$5 > 61000" | wc -l) -eq 0 ]'
run shards 2 --set model.init_from="$tmp/xs" || bad "sharded import: $(tail -n 3 "$tmp/shards.out")"
check "the sharded export imports on 2 ranks to 2 ranks' loss bit for bit" '[ -n "$(loss p2)" ] && [ "$(loss shards)" = "$(loss p2)" ]'

# 6. Trained weights: the hf export of a checkpoint trained on 2 ranks, imported and
#    exported to llm.c's format, is the llm.c export of that checkpoint.
run trained 2 --set train.steps=3 || bad "training: $(tail -n 3 "$tmp/trained.out")"
"$PPTRAIN" export --checkpoint "$tmp/trained/checkpoints/latest" --format hf --out "$tmp/xt" >/dev/null 2>&1 &&
  "$PPTRAIN" export --checkpoint "$tmp/trained/checkpoints/latest" --out "$tmp/t1.bin" >/dev/null 2>&1 &&
  run tback 1 --set model.init_from="$tmp/xt" --set train.steps=0 &&
  "$PPTRAIN" export --checkpoint "$tmp/tback/checkpoints/latest" --out "$tmp/t2.bin" >/dev/null 2>&1
check "trained: hf export -> import -> llm.c export = the llm.c export of the checkpoint" 'cmp -s "$tmp/t1.bin" "$tmp/t2.bin"'

# 7. Damaged or mismatched inputs: exit 2 naming the file and the tensor or key, before
#    output.dir is created. refuse LABEL PATTERN [--set ...]
refuse() {
  local label=$1 pattern=$2; shift 2
  timeout -s KILL 120 "$PPTRAIN" --config "$tmp/hf.yaml" --set output.dir="$tmp/refused" "$@" >"$tmp/refused.out" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$pattern" "$tmp/refused.out" && [ ! -e "$tmp/refused" ]; then ok "$label: exit 2, nothing written"
  else bad "$label: rc=$rc, output.dir $([ -e "$tmp/refused" ] && echo written || echo absent): $(cat "$tmp/refused.out")"; fi
  rm -rf "$tmp/refused"
}
# damage COPY SRC: a fresh copy of SRC in $tmp/COPY
damage() { rm -rf "$tmp/$1" && cp -r "$2" "$tmp/$1"; }
# patch FILE OLD NEW: overwrite the first OLD with NEW (same length) in place
patch() {
  local off=$(grep -obUaF -- "$2" "$1" | head -n 1 | cut -d: -f1)
  [ -n "$off" ] && [ ${#2} -eq ${#3} ] && printf '%s' "$3" | dd of="$1" bs=1 seek="$off" conv=notrunc status=none
}
C_ATTN=transformer.h.2.attn.c_attn.weight C_FC=transformer.h.1.mlp.c_fc.weight

damage shape "$HF" && patch "$tmp/shape/model.safetensors" "\"$C_ATTN\":{\"dtype\":\"F32\",\"shape\":[32,96]" "\"$C_ATTN\":{\"dtype\":\"F32\",\"shape\":[96,32]"
refuse "a wrong shape" "$tmp/shape/model.safetensors: tensor \"$C_ATTN\" has shape [96, 32], expected [32, 96] (pptrain's h.2.qkvw, stored transposed)" --set model.init_from="$tmp/shape"
damage ids "$HF" && big=$(printf '1000000000000000%03d, ' $(seq 16)) &&
  sed -i "s/\"eos_token_id\": 255,/\"eos_token_id\": [${big%, }],/" "$tmp/ids/config.json"
refuse "16 eos ids of 19 digits, past what model.eos_token_id holds" \
  "$tmp/ids/config.json: eos_token_id lists more ids than pptrain keeps" --set model.init_from="$tmp/ids"
damage dtype "$HF" && patch "$tmp/dtype/model.safetensors" "\"$C_FC\":{\"dtype\":\"F32\"" "\"$C_FC\":{\"dtype\":\"I32\""
refuse "a dtype that is not a float" "$tmp/dtype/model.safetensors: tensor \"$C_FC\" is I32" --set model.init_from="$tmp/dtype"
damage trunc "$HF" && truncate -s -100 "$tmp/trunc/model.safetensors"
refuse "a truncated model.safetensors" "$tmp/trunc/model.safetensors" --set model.init_from="$tmp/trunc"
damage strunc "$tmp/xs" && truncate -s -4 "$tmp/strunc/model-00002-of-0000$nsh.safetensors"
refuse "a truncated shard" "$tmp/strunc/model-00002-of-0000$nsh.safetensors" --set model.init_from="$tmp/strunc"
damage miss "$HF" && patch "$tmp/miss/model.safetensors" "\"$C_FC\":" "\"${C_FC%?}X\":"
refuse "a missing tensor (renamed)" "$tmp/miss/model.safetensors has no tensor \"$C_FC\" (pptrain's h.1.fcw)" --set model.init_from="$tmp/miss"
damage unidx "$tmp/xs" && grep -v "\"$C_FC\"" "$tmp/xs/model.safetensors.index.json" >"$tmp/unidx/model.safetensors.index.json"
refuse "a tensor the index leaves out of its weight_map" "holds tensor \"$C_FC\", but $tmp/unidx/model.safetensors.index.json's weight_map does not name it" --set model.init_from="$tmp/unidx"
damage nofile "$tmp/xs" && sed "s/\"\\($C_FC\\)\": \"model-0000.-of/\"\\1\": \"model-00009-of/" "$tmp/xs/model.safetensors.index.json" >"$tmp/nofile/model.safetensors.index.json"
refuse "an index naming a missing file" "$tmp/nofile/model.safetensors.index.json: weight_map puts tensor \"$C_FC\" in model-00009-of-0000$nsh.safetensors" --set model.init_from="$tmp/nofile"
refuse "model.dim set in the config, disagreeing" "model.dim is 64 in the config, but $HF/config.json has n_embd 32" --set model.dim=64
refuse "model.n_layers set in the config, disagreeing" "model.n_layers is 2 in the config, but $HF/config.json has n_layer 4" --set model.n_layers=2
refuse "model.tie_embeddings false against a tied config.json" "model.tie_embeddings is false in the config, but $HF/config.json has tie_word_embeddings true" --set model.tie_embeddings=false
damage mtype "$HF" && sed -i 's/"model_type": "gpt2"/"model_type": "bert"/' "$tmp/mtype/config.json"
refuse "an unsupported model_type" "$tmp/mtype/config.json: model_type \"bert\" is not supported" --set model.init_from="$tmp/mtype"
# 100,000 layers in config.json and the tensors of 4: refused at the first one missing, at
# once ([Note: tensor index]: a linear search per tensor took over a minute to get there)
damage deep "$HF" && sed -i 's/"n_layer": 4,/"n_layer": 100000,/' "$tmp/deep/config.json"
refuse "n_layer 100000 over the tensors of 4 layers" \
  "$tmp/deep/model.safetensors has no tensor \"transformer.h.4.ln_1.weight\" (pptrain's h.4.ln1w)" \
  --set model.init_from="$tmp/deep"
# 2 layers in config.json over the weights of 4: refused, not imported as its first 2
# layers (pptrain would train and save a truncated model; transformers warns of unused
# weights); the unused tensors named and counted
damage few "$HF" && sed -i 's/"n_layer": 4,/"n_layer": 2,/' "$tmp/few/config.json"
refuse "n_layer 2 over the tensors of 4 layers" \
  "$tmp/few/model.safetensors holds 24 tensors that the model $tmp/few/config.json describes (model.arch gpt2) does not use: \"transformer.h.2.attn.c_attn.bias\"" \
  --set model.init_from="$tmp/few"
check "  ... saying which layers, and what to do" 'grep -qF "and 19 more, the tensors of layers 2-3, past its n_layer 2: pptrain would train and save a truncated model. If the weights are one model of 4 layers, set n_layer 4 in config.json" "$tmp/refused.out"'
damage act "$HF" && sed -i 's/"activation_function": "gelu_new"/"activation_function": "relu"/' "$tmp/act/config.json"
refuse "an unsupported activation" "$tmp/act/config.json: activation_function \"relu\" is not supported" --set model.init_from="$tmp/act"
damage noc "$HF" && sed -i '/"n_embd"/d' "$tmp/noc/config.json"
refuse "config.json without n_embd, the config without model.dim" "$tmp/noc/config.json has no hidden_size (n_embd), and the config does not set model.dim" --set model.init_from="$tmp/noc"
# the same directory with the key in the config: taken from there
run noc 1 --set model.init_from="$tmp/noc" --set model.dim=32 && check "config.json without n_embd, model.dim 32 in the config: the same loss" '[ "$(loss noc)" = "$l1" ]' || bad "noc: $(tail -n 3 "$tmp/noc.out")"

# tie_embeddings: auto in the config is not a choice: config.json's tie_word_embeddings holds
run auto 1 --set model.tie_embeddings=auto && check "model.tie_embeddings auto in the config: config.json's (tied: no lm_head to read), the same loss" '[ "$(loss auto)" = "$l1" ]' || bad "auto: $(tail -n 3 "$tmp/auto.out")"

# 8. Export refusals: a non-empty --out stays as it was; a bad flag is named.
mkdir -p "$tmp/full" && echo keep >"$tmp/full/x"
"$PPTRAIN" export --checkpoint "$tmp/zero/checkpoints/latest" --format hf --out "$tmp/full" >"$tmp/e.out" 2>&1
check "export into a non-empty directory: exit 2, its file untouched" '[ $? -eq 2 ] && grep -q "exists and is not empty" "$tmp/e.out" && [ "$(ls "$tmp/full")" = x ]'
"$PPTRAIN" export --checkpoint "$tmp/zero/checkpoints/latest" --format hf --out "$tmp/e1" --dtype fp16 >"$tmp/e.out" 2>&1
check "export --dtype fp16: exit 2 naming it, nothing written" '[ $? -eq 2 ] && grep -q "\-\-dtype fp16: expected fp32 or bf16" "$tmp/e.out" && [ ! -e "$tmp/e1" ]'
"$PPTRAIN" export --checkpoint "$tmp/zero/checkpoints/latest" --out "$tmp/e2" --max-shard-size 1GB >"$tmp/e.out" 2>&1
check "export --max-shard-size without --format hf: exit 2" '[ $? -eq 2 ] && grep -q "is for --format hf" "$tmp/e.out" && [ ! -e "$tmp/e2" ]'
finish
