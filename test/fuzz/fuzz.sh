#!/usr/bin/env bash
# fuzz.sh — build pptrain with ASan/UBSan into build/debug and run test/fuzz/fuzz.py on
# it: issue 17's fuzz areas with its counts (2,134 config mutations, 74 token files,
# 2,640 checkpoint corruptions of which 2,518 single-byte flips), and the areas of the
# surfaces added since: tok (tokenizer.json files and prepare-data's inputs), hub (Hugging
# Face directories), cli (shards, sample, plot, flight, options). Opt-in, not part of
# `make test`: about 11 minutes on two cores. Arguments go to fuzz.py, e.g.
#   test/fuzz/fuzz.sh                          # everything, results in build/fuzz
#   test/fuzz/fuzz.sh --area config --configs 200
#   test/fuzz/fuzz.sh --area tok,hub,cli --cases 300
# Exit 0 only when every case is ok: no crash, no hang, no silent wrong success.
set -eu
cd "$(dirname "$0")/../.."
make --no-print-directory data >/dev/null
make --no-print-directory -j2 DEBUG=1 build/debug/pptrain >/dev/null
echo "fuzz.sh: build/debug/pptrain built with -fsanitize=address,undefined"
rm -rf build/fuzz
exec python3 test/fuzz/fuzz.py --pptrain build/debug/pptrain --out build/fuzz "$@"
