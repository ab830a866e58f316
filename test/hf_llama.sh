#!/usr/bin/env bash
# hf_llama.sh — the Llama family's Hugging Face directories through the real binary (issue
# 26 items 3, 4): test/hf/{llama3,llama_mqa,qwen2,mistral} (transformers' save_pretrained
# of tiny random models, from test/hf/gen_llama.py) imported on 1 rank and pipelined on 2
# and 4 (1f1b, gpipe, zb-h1, zbv) train 10 steps to transformers' losses
# (test/hf/llama_loss.txt: the first within 1e-5, all ten within 1e-4); import -> export at
# fp32 gives the input's model.safetensors byte for byte, and the export imports again to
# the same loss (a trained checkpoint's export survives import and export again); damaged or mismatched inputs exit 2 naming the file and the key or tensor,
# and write nothing.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-hf-llama.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish
HF=test/hf
[ -f data/tiny/train.bin ] || skip_all "no data/tiny/train.bin (make data)"

# The model keys come from config.json (the config names none of them); the run is
# gen_llama.py's: B 4, T 32, 10 steps of AdamW at a constant lr 1e-3, pptrain's other
# optimizer defaults (betas 0.9 / 0.95, eps 1e-8, weight decay 0.1, clip 1.0).
cat >"$tmp/hf.yaml" <<EOF
model:
  init_from: $HF/llama3
pipeline:
  microbatches: 4
train:
  batch_size: 4
  seq_len: 32
  steps: 10
  optimizer: {lr: 1.0e-3}
  lr_schedule: {decay: constant}
data:
  train: data/tiny/train.bin
runtime:
  threads: 1
  timeout_s: 60
EOF

# run NAME DIR P [--set ...]: output.dir $tmp/NAME, its output in $tmp/NAME.out
run() {
  local name=$1 dir=$2 P=$3; shift 3
  timeout 120 scripts/pprun --nproc-per-node "$P" "$PPTRAIN" --config "$tmp/hf.yaml" \
    --set model.init_from="$dir" --set pipeline.stages="$P" --set output.dir="$tmp/$name" \
    "$@" >"$tmp/$name.out" 2>&1
}
losses() { tail -n +2 "$tmp/$1/losses.csv" | cut -d, -f2 | tr '\n' ' '; }
want() { awk -v k="$1" -v w="$2" '$1 == k && $2 == w { $1 = $2 = ""; print }' $HF/llama_loss.txt; }
# within TOL: the first of A and B (the lists) within FIRST, every pair within TOL; prints
# the largest difference
within() {
  awk -v a="$1" -v b="$2" -v first="$3" -v tol="$4" 'BEGIN {
    n = split(a, x, " "); m = split(b, y, " "); worst = 0; okay = n == m && n > 0
    for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > worst) worst = d
      if (d > (i == 1 ? first : tol)) okay = 0 }
    printf "%.1e", worst; exit !okay }'
}

# 1. Import on 1 rank and pipelined: transformers' losses, 10 steps. NAME DIR P [--set ...]
trains() {
  local name=$1 dir=$2 P=$3; shift 3
  if ! run "$name" "$HF/$dir" "$P" "$@"; then bad "$name: $(tail -n 3 "$tmp/$name.out")"; return; fi
  local got=$(losses "$name") ref=$(want "$dir" steps) d
  if d=$(within "$got" "$ref" 1e-5 1e-4); then
    ok "$dir on $P rank(s)${*:+ ($(echo "$*" | sed 's/--set pipeline\.//g'))}: 10 losses within $d of transformers' (first $(echo $got | cut -d' ' -f1) vs $(want "$dir" loss | tr -d ' '))"
  else bad "$dir on $P rank(s) $*: max difference $d: pptrain $got, transformers $ref"; fi
}
trains llama3-1 llama3 1
trains llama3-2 llama3 2 --set pipeline.schedule=zbv --set pipeline.virtual_stages=2
trains llama3-4 llama3 4 --set pipeline.schedule=zb-h1
trains mqa-1 llama_mqa 1
trains mqa-2 llama_mqa 2 --set pipeline.schedule=zb-h1
trains mqa-4 llama_mqa 4 --set pipeline.schedule=gpipe
trains qwen2-1 qwen2 1
trains qwen2-2 qwen2 2
trains mistral-1 mistral 1
trains mistral-2 mistral 2 --set pipeline.schedule=zb-h1
# RoPE has no table: the config may cap max_seq_len below max_position_embeddings (512)
trains llama3-cap llama3 1 --set model.max_seq_len=32

# 2. Import -> 0 steps -> export at fp32: the input's model.safetensors byte for byte; the
#    export imports again to the same first loss bit for bit.
for dir in llama3 llama_mqa qwen2 mistral; do
  if ! run "zero-$dir" "$HF/$dir" 2 --set train.steps=0 ||
    ! "$PPTRAIN" export --checkpoint "$tmp/zero-$dir/checkpoints/latest" --format hf \
      --out "$tmp/x-$dir" >"$tmp/x-$dir.log" 2>&1; then
    bad "$dir: import and export: $(tail -n 3 "$tmp/zero-$dir.out" "$tmp/x-$dir.log")"; continue; fi
  check "$dir: import -> export at fp32: model.safetensors byte-identical to transformers' save_pretrained" \
    'cmp -s "$tmp/x-$dir/model.safetensors" "$HF/$dir/model.safetensors"'
  if run "back-$dir" "$tmp/x-$dir" 1 --set train.steps=1; then
    l1=$(losses "${dir/llama_mqa/mqa}-1" | cut -d' ' -f1)
    check "$dir: the export imports again to the same loss bit for bit ($l1)" '[ -n "$l1" ] && [ "$(losses "back-$dir" | cut -d" " -f1)" = "$l1" ]'
  else bad "$dir: re-import: $(tail -n 3 "$tmp/back-$dir.out")"; fi
done
# A trained checkpoint (3 steps on 2 ranks, zbv): exported, imported on 1 rank and exported
# again, the same file byte for byte.
if run trained "$HF/llama3" 2 --set train.steps=3 --set pipeline.schedule=zbv --set pipeline.virtual_stages=2 &&
  "$PPTRAIN" export --checkpoint "$tmp/trained/checkpoints/latest" --format hf --out "$tmp/xt" >"$tmp/xt.log" 2>&1 &&
  run tback "$tmp/xt" 1 --set train.steps=0 &&
  "$PPTRAIN" export --checkpoint "$tmp/tback/checkpoints/latest" --format hf --out "$tmp/xt2" >"$tmp/xt2.log" 2>&1; then
  check "trained 3 steps on 2 ranks: exported, imported, exported again, the same model.safetensors" \
    '! cmp -s "$tmp/xt/model.safetensors" $HF/llama3/model.safetensors && cmp -s "$tmp/xt/model.safetensors" "$tmp/xt2/model.safetensors"'
else bad "trained export: $(tail -n 3 "$tmp/trained.out" "$tmp/xt.log" "$tmp/tback.out" "$tmp/xt2.log" 2>/dev/null)"; fi
check "the exports' config.json: the class, GQA, the MLP, rms_norm_eps, RoPE 500000 with llama3 scaling, untied; mqa tied with rope_scaling null; qwen2 and mistral without a window" \
  'grep -q "\"LlamaForCausalLM\"" "$tmp/x-llama3/config.json" && grep -q "\"num_key_value_heads\": 2," "$tmp/x-llama3/config.json" &&
   grep -q "\"intermediate_size\": 64," "$tmp/x-llama3/config.json" && grep -q "\"rms_norm_eps\": 1e-05," "$tmp/x-llama3/config.json" &&
   grep -q "\"rope_theta\": 500000.0," "$tmp/x-llama3/config.json" && grep -q "\"rope_type\": \"llama3\"" "$tmp/x-llama3/config.json" &&
   grep -q "\"original_max_position_embeddings\": 256," "$tmp/x-llama3/config.json" &&
   grep -q "\"tie_word_embeddings\": false" "$tmp/x-llama3/config.json" && grep -q "\"rope_scaling\": null" "$tmp/x-llama_mqa/config.json" &&
   grep -q "\"tie_word_embeddings\": true" "$tmp/x-llama_mqa/config.json" && grep -q "\"Qwen2ForCausalLM\"" "$tmp/x-qwen2/config.json" &&
   grep -q "\"sliding_window\": null" "$tmp/x-qwen2/config.json" && grep -q "\"sliding_window\": null" "$tmp/x-mistral/config.json"'

# 3. Damaged or mismatched inputs: exit 2 naming the file and the key or tensor, before
#    output.dir is created. refuse LABEL PATTERN [--set ...]
refuse() {
  local label=$1 pattern=$2; shift 2
  "$PPTRAIN" --config "$tmp/hf.yaml" --set output.dir="$tmp/refused" "$@" >"$tmp/refused.out" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$pattern" "$tmp/refused.out" && [ ! -e "$tmp/refused" ]; then ok "$label: exit 2, nothing written"
  else bad "$label: rc=$rc, output.dir $([ -e "$tmp/refused" ] && echo written || echo absent): $(cat "$tmp/refused.out")"; fi
  rm -rf "$tmp/refused"
}
# damage COPY SRC: a fresh copy of SRC in $tmp/COPY
damage() { rm -rf "$tmp/$1" && cp -r "$2" "$tmp/$1"; }
K_PROJ=model.layers.1.self_attn.k_proj.weight
damage act $HF/llama3 && sed -i 's/"hidden_act": "silu"/"hidden_act": "gelu"/' "$tmp/act/config.json"
refuse "hidden_act gelu" "$tmp/act/config.json: hidden_act \"gelu\" is not supported" --set model.init_from="$tmp/act"
damage yarn $HF/llama3 && sed -i 's/"rope_type": "llama3"/"rope_type": "yarn"/' "$tmp/yarn/config.json"
refuse "rope_scaling's rope_type yarn (the Hub's form)" "$tmp/yarn/config.json: rope_scaling.rope_type \"yarn\" is not supported" --set model.init_from="$tmp/yarn"
damage yarn5 $HF/llama_mqa && sed -i 's/"rope_type": "default"/"rope_type": "yarn"/' "$tmp/yarn5/config.json"
refuse "rope_parameters' rope_type yarn (transformers 5's form)" "$tmp/yarn5/config.json: rope_parameters.rope_type \"yarn\" is not supported" --set model.init_from="$tmp/yarn5"
refuse "model.n_kv_heads in the config, disagreeing" "model.n_kv_heads is 4 in the config, but $HF/llama3/config.json has num_key_value_heads 2" --set model.n_kv_heads=4
refuse "model.rope_scaling: null in the config against llama3" "model.rope_scaling is none in the config, but $HF/llama3/config.json has rope_scaling llama3" --set model.rope_scaling=null
# k_proj renamed in the header (same length): the file no longer holds it
damage nok $HF/llama3 && off=$(grep -obUaF "\"$K_PROJ\"" "$tmp/nok/model.safetensors" | head -n 1 | cut -d: -f1) &&
  printf '"%s"' "${K_PROJ/k_proj/k_prox}" | dd of="$tmp/nok/model.safetensors" bs=1 seek="$off" conv=notrunc status=none
refuse "a missing k_proj" "$tmp/nok/model.safetensors has no tensor \"$K_PROJ\" (pptrain's h.1.qkvw)" --set model.init_from="$tmp/nok"
# the header length 2 short: the header's 2 padding spaces dropped still parse, the data
# section would start 2 bytes early and every tensor be read shifted
damage hlen $HF/llama3 && n=$(od -An -tu8 -N8 "$tmp/hlen/model.safetensors" | tr -d ' ') &&
  python3 -c "import struct, sys; sys.stdout.buffer.write(struct.pack('<Q', $n - 2))" |
  dd of="$tmp/hlen/model.safetensors" bs=1 conv=notrunc status=none
refuse "a header length 2 bytes short" "$tmp/hlen/model.safetensors: 2 bytes follow the last tensor's data" --set model.init_from="$tmp/hlen"
damage eps0 $HF/llama3 && sed -i 's/"rms_norm_eps": 1e-05/"rms_norm_eps": 0/' "$tmp/eps0/config.json"
refuse "rms_norm_eps 0: config_finalize's refusal names the file and key" \
  "$tmp/eps0/config.json: model.norm_eps (epsilon of the norms" --set model.init_from="$tmp/eps0"
damage win $HF/mistral && sed -i 's/"sliding_window": 4096/"sliding_window": 16/' "$tmp/win/config.json"
refuse "mistral's sliding_window 16 under train.seq_len 32" "$tmp/win/config.json: sliding_window 16 is shorter than train.seq_len 32" --set model.init_from="$tmp/win"
"$PPTRAIN" export --checkpoint "$tmp/zero-llama3/checkpoints/latest" --out "$tmp/l.bin" >"$tmp/e.out" 2>&1
check "a llama checkpoint to llm.c's format: exit 2, nothing written" '[ $? -eq 2 ] && grep -q "llm.c'"'"'s format holds GPT-2 only" "$tmp/e.out" && [ ! -e "$tmp/l.bin" ]'
finish
