#!/usr/bin/env bash
# bench/netem.sh — `make bench` (one line of bench/run.sh): how much of the transfer time
# over a slow inter-node link the runtime hides behind computation (issue 16, item 3).
# Two ranks, one per network namespace of this script's own, joined by a link that
# delays every packet by DELAY each way and limits each direction to RATE with tc tbf:
# a veth pair with tc netem where the kernel has it, else (CONFIG_NET_SCH_NETEM unset)
# two TUN devices joined by bench/delayline.c, which holds each packet for DELAY.
# configs/bench-small (1F1B, M = 8, one thread per rank) trains with the slow link and
# with a fast one (the same path without delay or rate limit), twice each, alternating.
# The link model is X = DELAY + (bytes - burst) / RATE (tbf lets its burst through at
# once) per activation or gradient, and
#   transfer time = 2 (P-1) M X per step (every activation and gradient, one by one)
#   exposed       = how much longer a step takes with the slow link
#   hidden        = 1 - exposed / transfer time (1: all of it behind computation)
# measured, and as the simulator (`pptrain schedule --costs F,B,X`) predicts it. From
# the trace, per step: the pipeline time (first to last action of either rank, without
# the optimizer), bubble = 1 - busy / (P * pipeline time), and the step's mean F and B.
# The machine may be shared, so compute time varies from step to step: each step is
# measured against the simulator given its own F and B with X = 0 (its ideal on a fast
# link), and exposed = median over slow-link steps of (pipeline - ideal) - median over
# fast-link steps of (pipeline - ideal); the simulator's exposed is its time with X
# minus with 0. The table also gives the plain medians, and the simulator's prediction
# from F and B measured on the fast link.
# Skips (saying why, exit 0) where namespaces, tc tbf, or both netem and TUN are missing.
#   PP_NETEM_DELAY_MS=5 PP_NETEM_RATE_MBIT=100 PP_NETEM_STEPS=10 bash bench/netem.sh
# (PP_NETEM_KEEP=DIR keeps the runs' output and traces there.)
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 1
PPTRAIN=$(realpath "${PPTRAIN:-./pptrain}")
DELAY_MS=${PP_NETEM_DELAY_MS:-5}   # one way, each direction
RATE_MBIT=${PP_NETEM_RATE_MBIT:-100} # each direction
BURST=15000 # tbf's bucket, bytes: as small as tbf keeps the rate with (>= rate / HZ)
STEPS=${PP_NETEM_STEPS:-10}       # per run; the first is not measured
cfg=configs/bench-small.yaml
[ "$STEPS" -ge 3 ] 2>/dev/null || { echo "bench/netem.sh: PP_NETEM_STEPS must be 3 or more"; exit 2; }
skip() { echo "   skipped: $1"; exit 0; }

echo "== slow inter-node link: 2 ranks in 2 network namespaces, $DELAY_MS ms delay + tc tbf $RATE_MBIT Mbit/s each way"
echo "   ($cfg, 1f1b, M=8, 1 thread per rank: the transfer time hidden behind computation, measured vs the simulator)"
command -v ip >/dev/null && command -v tc >/dev/null || skip "no ip or tc (Debian: apt-get install iproute2)"
A=ppnetemA$$ B=ppnetemB$$
ip netns add "$A" 2>/dev/null || skip "cannot create network namespaces here (needs root or CAP_NET_ADMIN)"
tmp=$(mktemp -d /tmp/pptrain-netem.XXXXXX)
pids=() wire=
cleanup() {
  for p in "${pids[@]}" $wire; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  ip netns del "$A" 2>/dev/null; ip netns del "$B" 2>/dev/null
  [ -z "${PP_NETEM_KEEP:-}" ] || cp -r "$tmp/." "$PP_NETEM_KEEP/"
  rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$B"
for n in "$A" "$B"; do ip -n "$n" link set lo up; done
tbf() { tc -n "$1" qdisc add dev "$2" root handle 1: tbf rate "${RATE_MBIT}mbit" burst "$BURST" latency 1s; }

# The link: a veth pair with netem (under tbf, which takes from it what its delay
# released), or TUN devices and bench/delayline.c.
ip link add "v$A" type veth peer name "v$B"
ip link set "v$A" netns "$A"; ip link set "v$B" netns "$B"
ip -n "$A" addr add 10.78.0.1/24 dev "v$A"; ip -n "$B" addr add 10.78.0.2/24 dev "v$B"
for n in "$A" "$B"; do ip -n "$n" link set "v$n" up; done
if tbf "$A" "v$A" 2>"$tmp/tc.err" &&
   tc -n "$A" qdisc add dev "v$A" parent 1:1 handle 10: netem delay "${DELAY_MS}ms" limit 100000 2>>"$tmp/tc.err"; then
  mode=netem
  tc -n "$A" qdisc del dev "v$A" root
  echo "   link: veth pair, tc tbf with tc netem as its child on both ends"
elif grep -q "qdisc kind is unknown" "$tmp/tc.err" && tc -n "$A" qdisc show dev "v$A" | grep -q tbf &&
     [ -c /dev/net/tun ] && ${CC:-cc} -O2 -o "$tmp/delayline" bench/delayline.c 2>>"$tmp/tc.err"; then
  mode=wire
  tc -n "$A" qdisc del dev "v$A" root
  ip link del "v$A" 2>/dev/null
  echo "   link: this kernel has no tc netem (CONFIG_NET_SCH_NETEM): TUN devices joined by bench/delayline.c for the delay, tc tbf on both"
else
  skip "tc cannot add tbf and netem, and no TUN fallback: $(head -n 1 "$tmp/tc.err")"
fi

# link slow|fast: the delay and rate limit on, or off (no delay, no tbf: a fast link).
link() {
  local n d=0
  [ "$1" = slow ] && d=$DELAY_MS
  if [ $mode = netem ]; then
    for n in "$A" "$B"; do
      tc -n "$n" qdisc del dev "v$n" root 2>/dev/null
      if [ "$1" = slow ]; then
        tbf "$n" "v$n" && tc -n "$n" qdisc add dev "v$n" parent 1:1 handle 10: netem delay "${d}ms" limit 100000 || exit 1
      fi
    done
    return
  fi
  [ -z "$wire" ] || { kill "$wire"; wait "$wire" 2>/dev/null; }
  : >"$tmp/wire.out"
  "$tmp/delayline" "$A" "$B" "$(awk -v d="$d" 'BEGIN { print d * 1000 }')" >>"$tmp/wire.out" 2>&1 &
  wire=$!
  for _ in $(seq 200); do grep -q ready "$tmp/wire.out" && break; sleep 0.05; done
  grep -q ready "$tmp/wire.out" || { echo "   FAILED: bench/delayline.c: $(cat "$tmp/wire.out")"; exit 1; }
  ip -n "$A" addr add 10.78.0.1 peer 10.78.0.2 dev pptun0; ip -n "$B" addr add 10.78.0.2 peer 10.78.0.1 dev pptun0
  for n in "$A" "$B"; do
    ip -n "$n" link set pptun0 up
    if [ "$1" = slow ]; then tbf "$n" pptun0 || exit 1; fi
  done
}

# run NAME: both ranks train; trace in $tmp/NAME/trace.json.
port=29640
run() {
  local r rc=0
  port=$((port + 1))
  pids=()
  for r in 0 1; do
    ip netns exec "$([ $r = 0 ] && echo "$A" || echo "$B")" env RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 \
      LOCAL_WORLD_SIZE=1 MASTER_ADDR=10.78.0.1 MASTER_PORT=$port timeout 600 "$PPTRAIN" --config "$cfg" \
      --set runtime.threads=1 --set pipeline.schedule=1f1b --set pipeline.microbatches=8 \
      --set train.steps="$STEPS" --set data.val=null --set output.checkpoint_final=false \
      --set output.dir="$tmp/$1" --trace >"$tmp/$1.r$r" 2>&1 &
    pids+=($!)
  done
  for r in 0 1; do wait "${pids[$r]}" || rc=$?; done
  pids=()
  if [ $rc -ne 0 ]; then echo "   FAILED ($1): $(tail -n 2 "$tmp/$1.r0" "$tmp/$1.r1")"; exit 1; fi
}
link fast; run base1; link slow; run link1; link fast; run base2; link slow; run link2

read -r batch seq dim mbs < <("$PPTRAIN" --config "$cfg" --set pipeline.microbatches=8 --print-config | awk '
  /^  batch_size:/ {b=$2} /^  seq_len:/ {t=$2} /^  dim:/ {c=$2} /^  microbatches:/ {m=$2} END {print b, t, c, m}')
python3 - "$PPTRAIN" "$cfg" "$DELAY_MS" "$RATE_MBIT" "$BURST" "$mode" "$batch" "$seq" "$dim" "$mbs" "$tmp" <<'PY'
import json, statistics, subprocess, sys
pptrain, cfg, delay, rate, burst, mode, B, T, C, M, tmp = sys.argv[1:]
delay, rate, burst = float(delay), float(rate) * 1e6 / 8, float(burst)  # ms, bytes/s, bytes
B, T, C, M, P = int(B), int(T), int(C), int(M), 2

def steps(name):
    """Per measured step: pipeline span (first to last action of either rank, without the
    optimizer), busy time summed over ranks, and the mean F and B of its actions (ms)."""
    ev = [e for e in json.load(open(f"{tmp}/{name}/trace.json"))["traceEvents"] if e.get("ph") == "X"]
    out = {}
    for e in ev:
        s = e["args"]["step"]
        if s <= 1 or e["name"] == "optimizer": continue  # the first step warms up
        d = out.setdefault(s, {"t0": 1e30, "t1": 0, "busy": 0, "F": [], "B": []})
        d["t0"], d["t1"] = min(d["t0"], e["ts"]), max(d["t1"], e["ts"] + e["dur"])
        if e["cat"] == "compute":
            d["busy"] += e["dur"]
            d[e["name"][0]].append(e["dur"])
    return [{"span": (d["t1"] - d["t0"]) / 1e3, "bubble": 1 - d["busy"] / (P * (d["t1"] - d["t0"])),
             "F": statistics.mean(d["F"]) / 1e3, "B": statistics.mean(d["B"]) / 1e3} for d in out.values()]

def simulate(F, Bk, X):
    out = subprocess.run([pptrain, "schedule", "--config", cfg, "--set", "pipeline.schedule=1f1b",
                          "--set", f"pipeline.microbatches={M}", "--costs", f"{F},{Bk},{X}", "--json"],
                         check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    return j["makespan"], j["bubble_fraction"]

msg = (B // M) * T * C * 4 + 40  # an activation or its gradient, fp32, + the wire header
# what tbf counts: each 1448-byte TCP segment (MTU 1500, timestamps) with its IP and TCP
# headers, and on a veth its Ethernet header
wire = msg * (1448 + 52 + (14 if mode == "netem" else 0)) / 1448
X = delay + max(0.0, wire - burst) / rate * 1e3  # ms
transfers = 2 * (P - 1) * M
total = transfers * X
med = statistics.median
fast = [d for n in ("base1", "base2") for d in steps(n)]
slow = [d for n in ("link1", "link2") for d in steps(n)]
# The machine may be shared, so compute time varies from step to step: each step is
# compared with the simulator given that step's own mean F and B, with X = 0 (its ideal
# on a fast link) and with the link model. The fast link's steps show what the runtime
# adds to the ideal besides transfers (sends, wake-ups); exposed transfer time is what a
# slow-link step adds to its ideal beyond that.
for d in fast + slow:
    d["sim0"], _ = simulate(d["F"], d["B"], 0)
    d["simX"], d["simX_bubble"] = simulate(d["F"], d["B"], X)
over_fast = med(d["span"] - d["sim0"] for d in fast)
over_slow = med(d["span"] - d["sim0"] for d in slow)
exposed = over_slow - over_fast
exposed_sim = med(d["simX"] - d["sim0"] for d in slow)
F, Bk = med(d["F"] for d in fast), med(d["B"] for d in fast)
sim0, simX = simulate(F, Bk, 0), simulate(F, Bk, X)
print(f"   link model: X = {delay:g} ms + ({wire:.0f} B on the wire - {burst:.0f} B burst) / {rate * 8e-6:g} Mbit/s "
      f"= {X:.1f} ms per activation or gradient ({msg} B); {transfers} per step = {total:.0f} ms of transfer")
print(f"   F {F:.1f} ms, B {Bk:.1f} ms per microbatch and stage: medians over the {len(fast)} measured steps "
      f"on the fast link ({len(slow)} on the slow one)")
print("   per step, medians  pipeline ms  ideal*  over ideal  bubble  |  simulator, F and B above  pipeline ms  bubble")
for name, st, X_, sim in (("fast link", fast, 0, sim0), ("slow link", slow, X, simX)):
    print(f"   {name}          {med(d['span'] for d in st):11.1f} {med(d['sim0'] for d in st):7.1f}"
          f" {med(d['span'] - d['sim0'] for d in st):11.1f}  {100 * med(d['bubble'] for d in st):5.1f}%  |"
          f"  X = {X_:4.1f} ms               {sim[0]:11.1f}  {100 * sim[1]:5.1f}%")
print("   * the simulator's time for that step's own mean F and B with X = 0: the compute varies from step to step")
print(f"   transfer time exposed by the slow link: measured {over_slow:.0f} - {over_fast:.0f} = {exposed:.0f} of "
      f"{total:.0f} ms per step = hidden {100 * (1 - exposed / total):.0f}%; "
      f"simulator {exposed_sim:.0f} ms = hidden {100 * (1 - exposed_sim / total):.0f}%")
PY
