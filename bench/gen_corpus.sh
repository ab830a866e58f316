#!/usr/bin/env bash
# bench/gen_corpus.sh MB — a multilingual JSONL corpus of about MB megabytes on stdout, one
# document a line: {"id": N, "text": "..."}. Each document is 2 to 15 lines of
# bench/tokenize_seed.txt (sixteen languages and scripts, code, numbers, emoji with
# modifiers and ZWJ, tabs and runs of spaces), each line followed by a made-up word and a
# number, so that the corpus has frequent words and rare ones. Deterministic (a fixed awk
# seed: the same bytes on every run with the same awk) and Python-free: bench/tokenize.sh
# and test/prepare.sh use it.
set -euo pipefail
mb=${1:?usage: bench/gen_corpus.sh MB}
seed=$(dirname "$0")/tokenize_seed.txt
# JSON-escape the seed lines (backslash, quote, tab) once; awk joins them with "\n"
sed 's/\\/\\\\/g; s/"/\\"/g; s/\t/\\t/g' "$seed" | LC_ALL=C awk -v mb="$mb" '
{ line[n++] = $0 }
END {
  ns = split("ka lo mi ne ru sa te vo zi bar den fel gor hin jup kes lum mor nat pil qua", syl, " ")
  srand(20241126)
  for (doc = 0; out < mb * 1000000; doc++) {
    k = 2 + int(rand() * 14); s = ""
    for (i = 0; i < k; i++) {
      w = ""; m = 1 + int(rand() * 4)
      for (j = 0; j < m; j++) w = w syl[1 + int(rand() * ns)]
      s = s (i ? "\\n" : "") line[int(rand() * n)] " " w " " int(rand() * 100000)
    }
    printf "{\"id\": %d, \"text\": \"%s\"}\n", doc, s
    out += length(s) + 30
  }
}'
