#!/usr/bin/env bash
# bench/zb.sh — zero-bubble schedules measured (`make bench` runs it from bench/run.sh):
# 2 ranks x 1 thread on configs/bench-small.yaml, M = 4 and 8, for 1f1b, zb-h1, zbv and
# interleaved-1f1b (v = 2). For each: the measured step time; the pipeline's makespan
# (the longest rank's action list per step, without the optimizer: rank 0's, which
# starts first and ends last); each rank's busy (compute) time and its bubble =
# 1 - busy / makespan, the simulator's definition; and the simulator's prediction from
# the F, B (I) and W times the same run measured (runtime_report). The machine may be shared: the fastest of three runs is kept.
set -euo pipefail
cfg=configs/bench-small.yaml
out=$(mktemp -d /tmp/pptrain-zb.XXXXXX)
trap 'rm -rf "$out"' EXIT
common=(--set runtime.threads=1 --set data.val=null --set train.steps=12 --set output.checkpoint_final=false
        --set pipeline.stages=2)

echo "== zero-bubble schedules: 2 ranks x 1 thread, $cfg, best of 3 runs each"
printf "%-20s %2s %8s %9s | %-20s | %-20s | %7s | %s\n" schedule M "step ms" "makespan" "rank 0: busy, bubble" \
  "rank 1: busy, bubble" "bubble" "simulated from measured F/B/W: makespan, bubble"
for M in 4 8; do
  for sched in 1f1b zb-h1 zbv interleaved-1f1b; do
    extra=()
    case $sched in zbv | interleaved-1f1b) extra=(--set pipeline.virtual_stages=2) ;; esac
    best=
    for rep in 1 2 3; do
      scripts/pprun --nproc-per-node 2 ./pptrain --config "$cfg" "${common[@]}" --set pipeline.microbatches=$M \
        --set pipeline.schedule=$sched "${extra[@]}" --set output.dir="$out/run" >"$out/try.log" 2>&1 ||
        { cat "$out/try.log"; exit 1; }
      rm -rf "$out/run"
      ms=$(sed -n 's/^\[rank 0\] rank 0: per step \([0-9.]*\) ms.*/\1/p' "$out/try.log")
      if [ -z "$best" ] || python3 -c "import sys; sys.exit(not $ms < $best)"; then best=$ms; cp "$out/try.log" "$out/best.log"; fi
    done
    python3 - "$sched" "$M" "$out/best.log" <<'PY'
import re, sys
sched, M, log = sys.argv[1], sys.argv[2], open(sys.argv[3]).read()
ranks = {}
for r, step, pipe, busy in re.findall(r"rank (\d): per step ([0-9.]+) ms \(fastest [0-9.]+, pipeline ([0-9.]+) ms\), busy ([0-9.]+) ms", log):
    ranks[int(r)] = (float(step), float(pipe), float(busy))
sim = re.search(r"simulated makespan ([0-9.]+) ms .*?simulated bubble ([0-9.]+)%", log)
span = max(ranks[r][1] for r in (0, 1))
cells = ["%6.1f ms %5.1f%%" % (ranks[r][2], 100 * (1 - ranks[r][2] / span)) for r in (0, 1)]
name = sched + (" v=2" if sched in ("zbv", "interleaved-1f1b") else "")
total = 1 - (ranks[0][2] + ranks[1][2]) / (2 * span)  # sum(idle) / (P * makespan), as the simulator's
print("%-20s %2s %8.1f %9.1f | %-20s | %-20s | %6.1f%% | %s ms, %s%%" % (name, M, ranks[0][0], span, cells[0], cells[1],
      100 * total, sim.group(1), sim.group(2)))
PY
  done
done
echo "   (ms per step, means over the measured steps; the simulator replays the schedule with the mean F,"
echo "    B/I and W time of every stage measured in the same run, transfers free)"
