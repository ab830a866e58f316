#!/usr/bin/env bash
# bench/tokenize.sh — `make bench`'s tokenizer figures (issue 27): the encode throughput of
# `pptrain prepare-data`, in MB of document text per second over its whole run (reading,
# JSON, encoding, writing), on a generated multilingual JSONL corpus of about 50 MB
# (bench/gen_corpus.sh) at 1 and 2 threads; beside it the tokenizers library's
# encode_batch of the same texts (the encode alone) with RAYON_NUM_THREADS at the same
# count, where Python has the library, which also checks that the ids are the same. The
# tokenizer: a Llama 3-style byte-level BPE (its split regex, a vocabulary of up to 32000)
# that the library trains on the corpus's first 5 MB; without the library,
# test/tok/llama3.json (a vocabulary of 800) and pptrain's figures alone. One run each: the
# machine is shared, so the figures are noisy. TOKENIZE_MB sets the corpus size.
set -euo pipefail
PPTRAIN=${PPTRAIN:-./pptrain}
MB=${TOKENIZE_MB:-50}
out=$(mktemp -d /tmp/pptrain-tokenize.XXXXXX)
trap 'rm -rf "$out"' EXIT

bash bench/gen_corpus.sh "$MB" >"$out/c.jsonl"
tok=test/tok/llama3.json
hf=0
if python3 -c 'import tokenizers' 2>/dev/null; then
  hf=1
  tok=$out/tok.json
  python3 - "$out/c.jsonl" "$tok" <<'PY'
import json, sys
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
texts, n = [], 0
for line in open(sys.argv[1], encoding="utf-8"):
    texts.append(json.loads(line)["text"])
    n += len(texts[-1])
    if n > 5_000_000:
        break
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(LLAMA3_RE), behavior="isolated"),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(texts, trainers.BpeTrainer(
    vocab_size=32000, special_tokens=["<|endoftext|>"], show_progress=False,
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
tok.save(sys.argv[2])
PY
fi

what="$tok (no tokenizers library: pptrain alone)"
if [ $hf = 1 ]; then
  v=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["model"]["vocab"]))' \
    "$tok")
  what="a Llama 3-style byte-level BPE the tokenizers library trained (vocabulary $v)"
fi
echo "== tokenize: prepare-data's encode throughput on $(du -m "$out/c.jsonl" | cut -f1) MB" \
  "of JSONL (bench/gen_corpus.sh)"
echo "   tokenizer: $what"
echo "   MB/s of document text; pptrain: its whole run; tokenizers: encode_batch alone"
printf "%-8s %14s %16s %9s %s\n" threads "pptrain MB/s" "tokenizers MB/s" ratio "ids"
for t in 1 2; do
  "$PPTRAIN" prepare-data --tokenizer "$tok" --jsonl "$out/c.jsonl" --field text \
    --out "$out/p$t.bin" --threads $t >"$out/p$t.log" 2>&1 || { cat "$out/p$t.log"; exit 1; }
  ours=$(sed -n 's/.* s: \([0-9.]*\) MB\/s, .*/\1/p' "$out/p$t.log")
  theirs=- ratio=- same=-
  if [ $hf = 1 ]; then
    read -r theirs same < <(RAYON_NUM_THREADS=$t python3 - "$tok" "$out/c.jsonl" "$out/p$t.bin" \
      <<'PY'
import array, json, sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
texts = [json.loads(line)["text"] for line in open(sys.argv[2], encoding="utf-8")]
nbytes = sum(len(t.encode("utf-8")) for t in texts)
t0 = time.perf_counter()
enc = tok.encode_batch(texts, add_special_tokens=False)
dt = time.perf_counter() - t0
doc = tok.token_to_id("<|endoftext|>")
want = array.array("I")
for e in enc:
    want.append(doc)
    want.extend(e.ids)
raw = open(sys.argv[3], "rb").read()
width = 2 if array.array("i", raw[:4])[0] == 20240520 else 4
got = array.array("H" if width == 2 else "I", raw[1024:])
print("%.2f %s" % (nbytes / 1e6 / dt, "equal" if list(got) == list(want) else "DIFFER"))
PY
    )
    ratio=$(python3 -c "print('%.2fx' % ($ours / $theirs))")
  fi
  printf "%-8s %14s %16s %9s %s\n" "$t" "$ours" "$theirs" "$ratio" "$same"
done
