#!/usr/bin/env bash
# train.sh — end-to-end single-process runs of the real binary: the loss falls, the
# output files have the documented form, and bad usage exits 2 with a clear message.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-train.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish

# 1. gpt-tiny on one process: the loss falls well below its start (ln 256 = 5.55).
$PPTRAIN --config configs/gpt-tiny.yaml --set pipeline.stages=1 --set train.steps=120 \
  --set output.dir="$tmp/tiny" --set data.val_every=60 >"$tmp/tiny.out" 2>&1
check "gpt-tiny exits 0" "[ $? -eq 0 ]"
check "losses.csv header" "[ \"\$(head -n1 $tmp/tiny/losses.csv)\" = step,loss,lr,grad_norm,tokens_per_s,step_ms ]"
check "losses.csv has one row per logged step" "[ \$(tail -n +2 $tmp/tiny/losses.csv | wc -l) -eq 12 ]"
first=$(sed -n 2p "$tmp/tiny/losses.csv" | cut -d, -f2)
last=$(tail -n1 "$tmp/tiny/losses.csv" | cut -d, -f2)
check "loss falls: $first -> $last" "python3 -c 'import sys; sys.exit(not ($first > 4.0 and $last < 2.6))'"
check "progress line format" "grep -Eq '^step 120/120 \\| loss [0-9.]+ \\| lr .* tok/s .* eta' $tmp/tiny.out"
check "validation line" "grep -Eq '^step 120 \\| val loss [0-9.]+' $tmp/tiny.out"

# 2. --print-config round-trips through the loader.
$PPTRAIN --config configs/gpt-tiny.yaml --set train.steps=7 --print-config >"$tmp/eff.yaml"
$PPTRAIN --config "$tmp/eff.yaml" --print-config >"$tmp/eff2.yaml"
check "--print-config loads back to the same config" "cmp -s $tmp/eff.yaml $tmp/eff2.yaml && grep -q 'steps: 7' $tmp/eff.yaml"

# 3. Usage and config errors: exit 2, message names the problem.
expect2() { # name, grep pattern, args...
  local name=$1 pat=$2; shift 2
  "$PPTRAIN" "$@" >"$tmp/err.out" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -q -- "$pat" "$tmp/err.out"; then ok "$name"; else bad "$name (rc=$rc: $(head -c 300 "$tmp/err.out"))"; fi
}
printf 'model:\n  vocab_size: 256\n  max_seq_len: 64\n  n_layers: 2\n  n_heads: 2\n  dim: 32\ntrain:\n  stepz: 3\n' >"$tmp/typo.yaml"
expect2 "unknown key names file:line:col and the nearest key" "typo.yaml:8:3: .*did you mean 'train.steps'" --config "$tmp/typo.yaml"
expect2 "missing config file" "nonexistent.yaml" --config "$tmp/nonexistent.yaml"
expect2 "no arguments prints usage" "usage: pptrain"
expect2 "no --config" "--config FILE is required" --trace
expect2 "bad --set value" "train.steps" --config configs/gpt-tiny.yaml --set train.steps=abc
expect2 "cross-field check" "microbatches" --config configs/gpt-tiny.yaml --set pipeline.microbatches=3
expect2 "stages must match the process count" "pipeline.stages is 2 but 1 process was launched" --config configs/gpt-tiny.yaml --set output.dir="$tmp/x"
expect2 "unknown argument" "unknown argument" --config configs/gpt-tiny.yaml --bogus
CUDA_VISIBLE_DEVICES= expect2 "device cuda with no GPU: refused naming the cause, not faked" "runtime.device=cuda: " --config configs/gpt-tiny.yaml --set pipeline.stages=1 --set runtime.device=cuda --set output.dir="$tmp/x"
printf 'not a token file at all, just text\n' >"$tmp/bad.bin"
expect2 "bad token file names the file" "bad.bin" --config configs/gpt-tiny.yaml --set pipeline.stages=1 --set data.train="$tmp/bad.bin" --set output.dir="$tmp/x"
expect2 "vocab too small for the tokens" "train.bin" --config configs/gpt-tiny.yaml --set pipeline.stages=1 --set model.vocab_size=100 --set output.dir="$tmp/x"

# 4. output.checkpoint_final (issue 17, item 11): false writes no checkpoint at the end,
#    but checkpoint_every's saves (the last step's too) and a save on SIGTERM still happen.
$PPTRAIN --config configs/gpt-tiny.yaml --set pipeline.stages=1 --set train.steps=3 --set output.dir="$tmp/nofinal" \
  --set output.checkpoint_final=false >"$tmp/nofinal.out" 2>&1
check "checkpoint_final: false: exit 0, no checkpoint, says so" \
  "[ $? -eq 0 ] && [ ! -e $tmp/nofinal/checkpoints/latest ] && grep -q 'no checkpoint at the end' $tmp/nofinal.out"
$PPTRAIN --config configs/gpt-tiny.yaml --set pipeline.stages=1 --set train.steps=4 --set output.dir="$tmp/every" \
  --set output.checkpoint_final=false --set output.checkpoint_every=2 >"$tmp/every.out" 2>&1
check "checkpoint_final: false keeps checkpoint_every's saves, the last step's too" \
  "[ $? -eq 0 ] && [ \"\$(readlink $tmp/every/checkpoints/latest)\" = step_0000004 ] && [ -d $tmp/every/checkpoints/step_0000002 ]"
$PPTRAIN --config configs/gpt-tiny.yaml --set pipeline.stages=1 --set train.steps=100000 --set output.dir="$tmp/term" \
  --set output.checkpoint_final=false --set output.log_every=1 >"$tmp/term.out" 2>&1 &
pid=$!
for _ in $(seq 200); do [ "$(tail -n +2 "$tmp/term/losses.csv" 2>/dev/null | wc -l)" -ge 3 ] && break; sleep 0.1; done
kill -TERM $pid
for _ in $(seq 600); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done # at most 60 s
kill -9 $pid 2>/dev/null
wait $pid
check "checkpoint_final: false still saves on SIGTERM" "[ $? -eq 0 ] && [ -L $tmp/term/checkpoints/latest ]"
# ... and leaves the interrupted marker ([Note: the interrupted marker] in src/main.c),
# which --resume-if-present (the batch script's one command) resumes from and removes;
# on an empty output.dir it starts afresh, on a finished run it has nothing to do.
at=$(sed -n 's/^stopped on SIGTERM after step \([0-9]*\);.*/\1/p' "$tmp/term/interrupted" 2>/dev/null)
check "a stop on SIGTERM leaves output.dir/interrupted naming the saved step (${at:-none})" \
  "[ -n \"$at\" ] && [ \"\$(readlink $tmp/term/checkpoints/latest)\" = step_\$(printf %07d $at) ]"
$PPTRAIN --config configs/gpt-tiny.yaml --set pipeline.stages=1 --set train.steps=$((${at:-0} + 2)) \
  --set output.dir="$tmp/term" --set output.checkpoint_final=false --set output.log_every=1 \
  --resume-if-present >"$tmp/term2.out" 2>&1
check "--resume-if-present resumes from it at step ${at:-none} and the finished run removes the marker" \
  "[ $? -eq 0 ] && grep -q 'resumed from .* at step ${at:-x}\$' $tmp/term2.out && [ ! -e $tmp/term/interrupted ]"
$PPTRAIN --config configs/gpt-tiny.yaml --set pipeline.stages=1 --set train.steps=2 --set output.dir="$tmp/rip" \
  --resume-if-present >"$tmp/rip.out" 2>&1
check "--resume-if-present on an empty output.dir starts afresh" \
  "[ $? -eq 0 ] && grep -q 'starting a fresh run' $tmp/rip.out && [ -L $tmp/rip/checkpoints/latest ]"
$PPTRAIN --config configs/gpt-tiny.yaml --set pipeline.stages=1 --set train.steps=2 --set output.dir="$tmp/rip" \
  --resume-if-present >"$tmp/rip2.out" 2>&1
check "--resume-if-present on a finished run: exit 0, resumed at its last step" \
  "[ $? -eq 0 ] && grep -q 'resumed from .* at step 2\$' $tmp/rip2.out"
expect2 "--resume with --resume-if-present" "exclude each other" --config configs/gpt-tiny.yaml --resume --resume-if-present

# 5. The report's numbers match their units (issue 17, item 11): peak RSS in MB (10^6
#    bytes) as the kernel counts it for the whole process (within the growth after the
#    report), and no pipeline efficiency above 100%.
python3 - "$PPTRAIN" "$tmp/rss" >"$tmp/rss.txt" 2>&1 <<'PY'
import re, resource, subprocess, sys
out = subprocess.run([sys.argv[1], "--config", "configs/gpt-tiny.yaml", "--set", "pipeline.stages=1",
                      "--set", "train.steps=5", "--set", "output.dir=" + sys.argv[2]],
                     capture_output=True, text=True).stdout
printed = float(re.search(r"peak RSS ([0-9.]+) MB", out).group(1))
kernel = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 / 1e6  # KiB -> MB
eff = re.search(r"^pipeline: simulated .*", out, re.M).group(0)
m = re.search(r"efficiency ([0-9.]+)%", eff)
ok = 0.97 * kernel <= printed <= kernel + 0.05 and (m is None or float(m.group(1)) <= 100.0)
print("printed %.1f MB, kernel %.1f MB; %s" % (printed, kernel, eff))
sys.exit(0 if ok else 1)
PY
rc=$?
check "peak RSS in MB and efficiency <= 100%: $(head -c 300 "$tmp/rss.txt")" "[ $rc -eq 0 ]"
# ...and it is this program's: a parent of 400 MB that forks and execs the rank (as
# torchrun's Python agent does) leaves its peak in the child's ru_maxrss, not in the
# report ([Note: peak RSS] in src/common.c).
python3 - "$PPTRAIN" "$tmp/rss-fork" >"$tmp/rss-fork.txt" 2>&1 <<'PY'
import os, re, resource, sys
held = bytearray(400 * 1000 * 1000)  # touched: resident in the parent, copied by fork
for i in range(0, len(held), 4096): held[i] = 1
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.dup2(w, 1)
    os.execv(sys.argv[1], [sys.argv[1], "--config", "configs/gpt-tiny.yaml", "--set", "pipeline.stages=1",
                           "--set", "train.steps=3", "--set", "output.dir=" + sys.argv[2]])
os.close(w)
out = os.fdopen(r).read()
os.waitpid(pid, 0)
printed = [float(x) for x in re.findall(r"peak RSS ([0-9.]+) MB", out)]
kernel = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 / 1e6
print("printed %s MB; the child's ru_maxrss %.1f MB" % (printed, kernel))
sys.exit(0 if printed and max(printed) < 100 and kernel > 400 else 1)
PY
rc=$?
check "peak RSS under a 400 MB parent that forks and execs the rank: $(head -c 200 "$tmp/rss-fork.txt")" "[ $rc -eq 0 ]"

finish
