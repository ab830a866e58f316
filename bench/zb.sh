#!/usr/bin/env bash
# bench/zb.sh — zero-bubble schedules measured (`make bench` runs it from bench/run.sh):
# 2 ranks x 1 thread on configs/bench-small.yaml, M = 4 and 8, for 1f1b, zb-h1, zbv and
# interleaved-1f1b (v = 2). For each: the measured step time, each rank's pipeline time
# (its action list, without the optimizer) and busy time, its bubble = 1 - busy/pipeline,
# and the simulator's prediction from the F, B (I) and W times the run measured
# (runtime_report). The machine may be shared: the fastest of three runs is kept.
set -euo pipefail
cfg=configs/bench-small.yaml
out=$(mktemp -d /tmp/pptrain-zb.XXXXXX)
trap 'rm -rf "$out"' EXIT
common=(--set runtime.threads=1 --set data.val=null --set train.steps=8 --set output.checkpoint_final=false
        --set pipeline.stages=2)

echo "== zero-bubble schedules: 2 ranks x 1 thread, $cfg, best of 3 runs each"
printf "%-18s %2s %9s | %-28s | %-28s | %s\n" schedule M "step ms" "rank 0: pipe/busy ms bubble" \
  "rank 1: pipe/busy ms bubble" "simulated from measured F/B/W: makespan, bubble"
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
cells = ["%6.1f/%6.1f %5.1f%%" % (ranks[r][1], ranks[r][2], 100 * (1 - ranks[r][2] / ranks[r][1])) for r in (0, 1)]
name = sched + (" v=2" if sched in ("zbv", "interleaved-1f1b") else "")
print("%-18s %2s %9.1f | %-28s | %-28s | %s ms, %s%%" % (name, M, ranks[0][0], cells[0], cells[1], sim.group(1), sim.group(2)))
PY
  done
done
echo "   (bubble = idle share of each rank's action list; the simulator replays the schedule with the"
echo "    mean F, B/I and W time of every stage measured in the same run, transfers free)"
