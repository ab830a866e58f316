#!/usr/bin/env bash
# untrusted.sh — files a user or an attacker may hand pptrain, through the real binary
# (issue 17, items 4, 6 and 9): a fresh run never replaces another run's checkpoints
# (also when `latest` is gone); checkpoints edited with their CRCs recomputed
# (test/forge.py) are refused naming the file, for resume and export; FIFOs, devices
# and directories where files belong are refused at once (never a blocked open), and
# neither a NUL nor a YAML tag slips through a config. Every run is under `timeout`:
# a hang fails the check (exit 124).
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-untrusted.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish
cfg=configs/gpt-tiny.yaml
one=(--config "$cfg" --set pipeline.stages=1 --set runtime.threads=1 --set data.val_every=0)

# expect LABEL RC PATTERN CMD...: CMD exits RC within 60 s and its output has PATTERN.
expect() {
  local label=$1 want=$2 pat=$3; shift 3
  timeout -k 5 60 "$@" >"$tmp/out" 2>&1
  local rc=$?
  if [ $rc -eq "$want" ] && grep -q -- "$pat" "$tmp/out"; then ok "$label: exit $rc, $(grep -m1 error "$tmp/out" | cut -c1-160)"
  else bad "$label: exit $rc (want $want), $(grep -m1 -e error -e fatal "$tmp/out" | cut -c1-300)"; fi
}
sums() { (cd "$1" && find . -type f | sort | xargs md5sum); }

# ---- item 4: a fresh run after `latest` was lost -----------------------------------
run=$tmp/r
timeout 120 scripts/pprun --nproc-per-node 2 "$PPTRAIN" --config "$cfg" --set train.steps=4 --set output.checkpoint_every=2 \
  --set output.dir="$run" >"$tmp/first.out" 2>&1 || bad "the first run failed: $(tail -n 3 "$tmp/first.out")"
rm "$run/checkpoints/latest"
before=$(sums "$run/checkpoints")
expect "a fresh run into an output.dir whose \`latest\` is gone refuses" 2 \
  "pass --resume $run/checkpoints/step_0000004 to continue it" \
  "$PPTRAIN" "${one[@]}" --set train.steps=4 --set output.checkpoint_every=2 --set train.seed=999 --set output.dir="$run"
[ "$before" = "$(sums "$run/checkpoints")" ] && ok "... and step_0000002 and step_0000004 are untouched" || bad "step directories changed"
expect "--resume without \`latest\` names the newest checkpoint and what to do" 1 \
  "pass the one to continue from, e.g. '$run/checkpoints/step_0000004'.*ln -s step_0000004" \
  "$PPTRAIN" "${one[@]}" --set train.steps=6 --set output.dir="$run" --resume
[ "$before" = "$(sums "$run/checkpoints")" ] && ok "... and nothing changed" || bad "a refused resume changed the checkpoints"
expect "--resume of the step directory it names continues" 0 "resumed from $run/checkpoints/step_0000004 at step 4" \
  "$PPTRAIN" "${one[@]}" --set train.steps=5 --set output.dir="$run" --resume "$run/checkpoints/step_0000004"
mkdir -p "$tmp/stale/checkpoints/step_0000002.tmp"
expect "an interrupted save alone (step_N.tmp) is no run to protect" 0 "saved checkpoint" \
  "$PPTRAIN" "${one[@]}" --set train.steps=1 --set output.dir="$tmp/stale"

# ---- item 6: checkpoints edited with their CRCs recomputed ---------------------------
good=$tmp/good
timeout 120 scripts/pprun --nproc-per-node 2 "$PPTRAIN" --config "$cfg" --set train.steps=4 --set output.checkpoint_every=2 \
  --set output.dir="$good" >"$tmp/good.out" 2>&1 || bad "the 2-rank run failed: $(tail -n 3 "$tmp/good.out")"
timeout 120 scripts/pprun --nproc-per-node 2 "$PPTRAIN" --config "$cfg" --set train.steps=4 --set model.init_std=0.03 \
  --set output.dir="$tmp/other" >"$tmp/other.out" 2>&1 || bad "the other model's run failed"
S=$tmp/x/checkpoints/step_0000004
M="V=256 Vp=256 maxT=64 L=4 NH=4 C=64 tied=1"
# forged LABEL PATTERN RESUME|EXPORT EDIT: a fresh copy of $good, EDIT (shell, on $S),
# then a resume or an export that must exit 1 naming PATTERN and change nothing.
forged() {
  local label=$1 pat=$2 how=$3 edit=$4
  rm -rf "$tmp/x" && cp -r "$good" "$tmp/x" && eval "$edit" || { bad "$label: the edit failed"; return; }
  local before; before=$(sums "$tmp/x/checkpoints")
  if [ "$how" = resume ]; then
    expect "$label" 1 "$pat" "$PPTRAIN" "${one[@]}" --set train.steps=8 --set output.dir="$tmp/x" --resume
  else
    expect "$label" 1 "$pat" "$PPTRAIN" export --checkpoint "$tmp/x/checkpoints" --out "$tmp/x/m.bin"
    [ -e "$tmp/x/m.bin" ] && bad "$label: an export was written"
  fi
  [ "$before" = "$(sums "$tmp/x/checkpoints")" ] || bad "$label: the checkpoint changed"
}
F="python3 test/forge.py"
forged "manifest step 4294967298 (cut to an int before)" "$S/manifest: step 4294967298 is more than any run can reach" resume "$F manifest $S step=4294967298"
forged "manifest step 2147483648 (a check in data.c before)" "$S/manifest: step 2147483648 is more than" resume "$F manifest $S step=2147483648"
forged "a shard of step 2 in step 4" "shard_00001.ckpt was written at step 2, but its manifest says 4" resume \
  "cp $good/checkpoints/step_0000002/shard_00001.ckpt $S/ && $F sums $S"
forged "a shard of another model (init_std)" "shard_00001.ckpt was written for a model of config hash" resume \
  "cp $tmp/other/checkpoints/step_0000004/shard_00001.ckpt $S/ && $F sums $S"
forged "a shard's world size" "shard_00001.ckpt was written by a run of world size 3, but its manifest says 2" resume \
  "$F meta $S/shard_00001.ckpt 'world\\x02' 'world\\x03' && $F sums $S"
forged "a shard's rank" "shard_00000.ckpt was written by rank 1, but its manifest says 0" resume \
  "$F meta $S/shard_00000.ckpt 'rank\\x00' 'rank\\x01' && $F sums $S"
forged "export: the manifest claims L=3 of 4" "shard_00000.ckpt holds model '$M', but its manifest says" export \
  "$F manifest $S 'extra.model=${M/L=4/L=3}'"
forged "export: manifest and shards claim L=3 of 4" "holds tensor 'h.3.ln1w', which its manifest's model" export \
  "$F meta $S/shard_00000.ckpt 'L=4 ' 'L=3 ' && $F meta $S/shard_00001.ckpt 'L=4 ' 'L=3 ' && $F sums $S && $F manifest $S 'extra.model=${M/L=4/L=3}'"
for dims in "NH=0:NH=0: the number of heads must be >= 1" "V=0:V=0: the vocabulary" "L=200000000:L=200000000: the number of layers must be in" \
  "C=1000000000:C=1000000000: the channels must be in" "C=63:C=63 is not a multiple of NH=4"; do
  key=${dims%%=*} val=${dims#*=}; val=${val%%:*}; pat=${dims#*:}
  m=$(sed -E "s/(^| )$key=[0-9]+/\\1$key=$val/" <<<"$M")
  forged "export: the manifest claims $key=$val" "describes no buildable model ($pat" export "$F manifest $S 'extra.model=$m'"
done
forged "export: a model entry that is no model" "is not 'V=.. Vp=.." export "$F manifest $S 'extra.model=V=99999999999 Vp=1'"
rm -rf "$tmp/x" && cp -r "$good" "$tmp/x" && $F sums "$S"
expect "an untouched checkpoint, its sums rewritten, still exports" 0 "exported" "$PPTRAIN" export --checkpoint "$tmp/x/checkpoints" --out "$tmp/x/m.bin"

# ---- item 9: what is not a regular file, NULs, tags ----------------------------------
mkfifo "$tmp/fifo"
expect "a FIFO as the config" 2 "cannot read config file: it is a FIFO, not a regular file" "$PPTRAIN" --config "$tmp/fifo"
expect "--config /dev/zero" 2 "it is a character device, not a regular file" "$PPTRAIN" --config /dev/zero
head -c 2000000 /dev/zero | tr '\0' '#' >"$tmp/big.yaml"
expect "a config over 1 MiB" 2 "over the limit of 1048576 bytes" "$PPTRAIN" --config "$tmp/big.yaml"
for key in data.train data.val; do
  expect "a FIFO as $key" 2 "data file '$tmp/fifo' is a FIFO, not a regular file" "$PPTRAIN" "${one[@]}" --set data.val_every=1 --set "$key=$tmp/fifo" --set output.dir="$tmp/o9"
done
expect "a FIFO as model.init_from" 2 "model.init_from: '$tmp/fifo' is a FIFO, not a regular file" "$PPTRAIN" "${one[@]}" --set model.init_from="$tmp/fifo" --set output.dir="$tmp/o9"
expect "a directory without config.json as model.init_from" 2 "model.init_from: '$tmp' is a directory without config.json" "$PPTRAIN" "${one[@]}" --set model.init_from="$tmp" --set output.dir="$tmp/o9"
mkdir -p "$tmp/o9-csv" && mkfifo "$tmp/o9-csv/losses.csv"
expect "a FIFO as output.dir/losses.csv (nobody reads it)" 1 "losses.csv for writing: it is a FIFO, not a regular file" \
  "$PPTRAIN" "${one[@]}" --set train.steps=1 --set output.dir="$tmp/o9-csv"
forged "a FIFO as the manifest" "$S/manifest: it is a FIFO, not a regular file" resume "rm $S/manifest && mkfifo $S/manifest"
forged "a FIFO as a shard" "shard_00001.ckpt: it is a FIFO, not a regular file" resume "rm $S/shard_00001.ckpt && mkfifo $S/shard_00001.ckpt"
sed 's|train: data/tiny/train.bin|train: "data/tiny/train.bin\\0junk"|' "$cfg" >"$tmp/nul.yaml"
expect "a NUL inside a quoted YAML string (trained on the part before it)" 2 "$tmp/nul.yaml:23:10: the value holds a NUL byte" \
  "$PPTRAIN" --config "$tmp/nul.yaml" --set pipeline.stages=1 --set train.steps=1 --set output.dir="$tmp/o9-nul"
sed 's/n_layers: 4/n_layers: !!str 4/' "$cfg" >"$tmp/tag.yaml"
expect "n_layers: !!str 4 (an int before)" 2 "model.n_layers: the YAML tag !!str makes '4' a string" \
  "$PPTRAIN" --config "$tmp/tag.yaml" --set pipeline.stages=1 --set train.steps=1 --set output.dir="$tmp/o9-tag"

finish
