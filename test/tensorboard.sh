#!/usr/bin/env bash
# tensorboard.sh — output.tensorboard on a pipelined run with a resume: a 2-rank 1F1B run
# of 8 steps with a checkpoint at step 5, then resumed from it to 12 steps (so steps 6-8
# are trained again, with other learning rates: train.steps changed the cosine decay).
# The resume cuts steps 6-8 from the first run's event files and logs them anew. The
# files are read back by test/tbread.c (its own framing, CRC-32C and protobuf-c decoding;
# each tag's steps must advance, each step once) and, where the tensorboard Python package
# is importable ($TB_PYTHON, default python3), by TensorBoard's own EventFileLoader and
# EventAccumulator. Every row of losses.csv must be in the events at float32: loss, lr,
# grad norm, tokens/s and step ms; the validation losses those of the progress lines;
# each rank's bubble, transfer wait and peak memory at every step.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
TBREAD=${TBREAD:-build/cpu/test/tbread}
TB_PYTHON=${TB_PYTHON:-python3}
tmp=$(mktemp -d /tmp/pptrain-tb.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish
[ -x "$TBREAD" ] || { bad "no event reader $TBREAD (make $TBREAD)"; finish; }

# run NAME STEPS [ARGS...]: the run in $tmp/run, its output in $tmp/NAME.out
run() {
  local name=$1 steps=$2
  shift 2
  timeout 120 scripts/pprun --nproc-per-node 2 "$PPTRAIN" --config test/configs/pipe8.yaml \
    --set pipeline.stages=2 --set pipeline.microbatches=4 --set output.dir="$tmp/run" \
    --set output.tensorboard=true --set data.val=data/tiny/val.bin --set data.val_every=4 \
    --set output.checkpoint_every=5 --set output.checkpoint_final=false \
    --set train.steps="$steps" "$@" >"$tmp/$name.out" 2>&1
}
run first 8 || bad "the first run failed: $(tail -n 3 "$tmp/first.out")"
cp -r "$tmp/run/tb" "$tmp/tb-first"
run resumed 12 --resume || bad "the resumed run failed: $(tail -n 3 "$tmp/resumed.out")"

# 1. the files: one per rank and run, the resumed run's after the first's in name order
ls "$tmp/run/tb" >"$tmp/files"
names=$(sed -E 's/^events\.out\.tfevents\.[0-9]{10}\.[^/]+\.rank0000([01])$/rank\1/' "$tmp/files" |
  tr '\n' ' ')
[ "$names" = "rank0 rank0 rank1 rank1 " ] || [ "$names" = "rank0 rank1 rank0 rank1 " ] &&
  ok "4 event files, events.out.tfevents.SECONDS.HOST.rankNNNNN: $(tr '\n' ' ' <"$tmp/files")" ||
  bad "the event files: $(tr '\n' ' ' <"$tmp/files")"
first0=$(ls "$tmp/tb-first" | grep rank00000)
[ "$(grep rank00000 "$tmp/files" | head -n 1)" = "$first0" ] &&
  ok "rank 0's resumed file sorts after its first one ($first0)" ||
  bad "rank 0's files in name order: $(grep rank00000 "$tmp/files" | tr '\n' ' ')"

# 2. read back by tbread: framing, CRCs, file_version, every value
"$TBREAD" "$tmp/run/tb" >"$tmp/tb.txt" 2>"$tmp/tbread.err" &&
  ok "tbread: every record's CRCs, its Event, each tag's steps once and in order" ||
  bad "tbread: $(cat "$tmp/tbread.err")"
"$TBREAD" "$tmp/tb-first" >"$tmp/tb-first.txt" 2>&1 || bad "tbread of the first run's files"
mkdir "$tmp/cut" && cp "$tmp/run/tb/$(grep rank00001 "$tmp/files" | head -n 1)" "$tmp/cut/"
"$TBREAD" "$tmp/cut" >"$tmp/tb-cut.txt" 2>&1 || bad "tbread of rank 1's first file after the resume"
val() { grep -h "val loss" "$1" | sed -E 's/.*step ([0-9]+) \| val loss ([0-9.]+).*/\1 \2/'; }
{ val "$tmp/first.out" | awk '$1 <= 5'; val "$tmp/resumed.out"; } >"$tmp/val.txt" # as resumed
python3 - "$tmp/run/losses.csv" "$tmp/tb.txt" "$tmp/tb-first.txt" "$tmp/val.txt" "$tmp/tb-cut.txt" \
  >"$tmp/cmp.out" 2>&1 <<'PY'
import struct, sys
f32 = lambda x: struct.unpack("f", struct.pack("f", float(x)))[0]
def read(path):
    tags = {}
    for line in open(path):
        if line.startswith("FILES"): continue
        tag, step, v = line.split()
        tags.setdefault(tag, {})[int(step)] = float(v)
    return tags
tb, first, cut = read(sys.argv[2]), read(sys.argv[3]), read(sys.argv[5])
rows = [l.strip().split(",") for l in open(sys.argv[1]).readlines()[1:]]
steps = [int(r[0]) for r in rows]
assert steps == list(range(1, 13)), "losses.csv steps %s" % steps
cols = {"train/loss": 1, "train/lr": 2, "train/grad_norm": 3}
for tag, c in cols.items():   # the same float32, row for row
    assert sorted(tb[tag]) == steps, (tag, sorted(tb[tag]))
    for r in rows:
        assert f32(tb[tag][int(r[0])]) == f32(r[c]), (tag, r[0], tb[tag][int(r[0])], r[c])
# tokens/s and step ms: losses.csv rounds them to 0.1 and 0.001
for tag, c, tol in (("perf/tokens_per_s", 4, 0.05), ("perf/step_ms", 5, 0.0005)):
    assert sorted(tb[tag]) == steps, tag
    for r in rows:
        x, y = tb[tag][int(r[0])], float(r[c])
        assert abs(x - y) <= tol + 1e-6 * abs(y), (tag, r[0], x, y)
print("train/loss, train/lr, train/grad_norm equal losses.csv at float32 in all 12 rows; "
      "perf/tokens_per_s and perf/step_ms within its rounding")
# the first run's steps 6-8 (other lrs) were cut from its file, and logged anew
assert sorted(first["train/lr"]) == list(range(1, 9))
assert all(first["train/lr"][s] != tb["train/lr"][s] for s in (6, 7, 8))
assert all(first["train/lr"][s] == tb["train/lr"][s] for s in range(1, 6))
assert all(sorted(cut[t]) == list(range(1, 6)) for t in cols), {t: sorted(cut[t]) for t in cols}
print("the first run's steps 6-8 (other lrs) were cut from its file at the resume")
val = {int(s): float(v) for s, v in (l.split() for l in open(sys.argv[4]))}
assert sorted(val) == [4, 8, 12] and sorted(tb["val/loss"]) == [4, 8, 12], (val, tb.get("val/loss"))
assert all(abs(tb["val/loss"][s] - val[s]) <= 5.1e-5 for s in val), (tb["val/loss"], val)
print("val/loss at steps 4, 8, 12 equal the progress lines' (printed to 4 decimals)")
for r in ("rank_00", "rank_01"):
    b, w, m = (tb[r + "/" + k] for k in ("bubble_fraction", "transfer_wait_fraction",
                                         "peak_memory_mb"))
    assert sorted(b) == sorted(w) == sorted(m) == steps, r
    assert all(0 <= b[s] <= 1 and 0 <= w[s] <= b[s] + 1e-3 and m[s] > 1 for s in steps), r
print("rank_00 and rank_01: bubble_fraction, transfer_wait_fraction, peak_memory_mb at "
      "every step, in range")
assert "perf/mfu" not in tb   # a GPU's figure
PY
if [ $? -eq 0 ]; then while read -r line; do ok "$line"; done <"$tmp/cmp.out"
else bad "events against losses.csv: $(tail -n 3 "$tmp/cmp.out")"; fi

# 3. TensorBoard's own readers, where its Python package is importable
if "$TB_PYTHON" -c "import tensorboard" 2>/dev/null; then
  "$TB_PYTHON" - "$tmp/run/tb" "$tmp/tb.txt" "$tmp/run/losses.csv" >"$tmp/tbpy.out" 2>&1 <<'PY'
import glob, os, struct, sys
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.util import tensor_util
d = sys.argv[1]
pts = {}
for path in sorted(glob.glob(os.path.join(d, "events.out.tfevents.*"))):
    for ev in EventFileLoader(path).Load():
        for v in ev.summary.value:
            old = pts.setdefault(v.tag, {})
            assert all(s < ev.step for s in old), (path, v.tag, ev.step)
            old[ev.step] = float(tensor_util.make_ndarray(v.tensor))
mine = ["%s %d %.9g" % (t, s, pts[t][s]) for t in sorted(pts) for s in sorted(pts[t])]
theirs = [l.strip() for l in open(sys.argv[2]) if not l.startswith("FILES")]
assert mine == theirs, [x for x in zip(mine, theirs) if x[0] != x[1]][:3]
acc = event_accumulator.EventAccumulator(d, size_guidance={event_accumulator.SCALARS: 0})
acc.Reload()
shown = {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}
assert shown == {t: sorted(pts[t].items()) for t in pts}, "EventAccumulator differs"
f32 = lambda x: struct.unpack("f", struct.pack("f", float(x)))[0]
rows = [l.split(",") for l in open(sys.argv[3]).readlines()[1:]]
assert shown["train/loss"] == [(int(r[0]), f32(r[1])) for r in rows], shown["train/loss"]
print("EventFileLoader reads what tbread read (%d points), and EventAccumulator shows them, "
      "train/loss equal to losses.csv" % len(mine))
PY
  rc=$?
  version=$("$TB_PYTHON" -c 'import tensorboard; print(tensorboard.__version__)')
  [ $rc -eq 0 ] && ok "tensorboard $version: $(tail -n 1 "$tmp/tbpy.out")" ||
    bad "TensorBoard's readers: $(tail -n 3 "$tmp/tbpy.out")"
else
  skip "the tensorboard Python package is not importable by $TB_PYTHON: the events were read by \
tbread only (pip install tensorboard, or TB_PYTHON=a python that has it)"
fi
finish
