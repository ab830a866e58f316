#!/usr/bin/env bash
# cli_args.sh — the command line's words that main.c alone reads (the hostile-input
# campaign's cli area, test/fuzz/fuzz_cli.py): a word or an option that nothing takes is
# an error naming it, exit 2, also beside --print-config and --version, which once
# printed and exited 0; no arguments and an unknown command say "error:" before the
# usage. Each pptrain call is a fraction of a second.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-cli-args.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish

# refused NAME PATTERN ARGS...: exit 2, an "error:" line matching PATTERN, nothing on stdout
refused() {
  local name=$1 pat=$2
  shift 2
  timeout 60 "$PPTRAIN" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ $rc -eq 2 ] && [ ! -s "$tmp/out" ] && grep -q -- "^error: .*$pat" "$tmp/err" && ok "$name" ||
    bad "$name: exit $rc, stdout $(head -c 80 "$tmp/out"), stderr $(head -n 2 "$tmp/err" | tr '\n' ' ')"
}
C=(--config configs/gpt-tiny.yaml)
refused "--print-config with a stray word" "unknown argument 'stray'" "${C[@]}" --print-config stray
refused "--print-config with an unknown option" "unknown argument '--bogus'" "${C[@]}" --bogus --print-config
refused "--version with a stray word" "--version takes no argument, not 'stray'" --version stray
refused "an unknown command" "unknown command 'frobnicate'" frobnicate --config configs/gpt-tiny.yaml
refused "no arguments" "no arguments: a run needs --config FILE"
refused "--resume '' (it resumed from the latest)" "--resume '': an empty CHECKPOINT path" \
  "${C[@]}" --resume "" --set pipeline.stages=1 --set output.dir="$tmp/run"
"$PPTRAIN" "${C[@]}" --print-config >"$tmp/out" 2>&1 && grep -q "^model:" "$tmp/out" &&
  ok "--print-config alone prints the config" || bad "--print-config: $(head -n 2 "$tmp/out")"
"$PPTRAIN" --version >"$tmp/out" 2>&1 && grep -q "^pptrain " "$tmp/out" &&
  ok "--version alone prints the version" || bad "--version: $(head -n 2 "$tmp/out")"
finish
