#!/usr/bin/env bash
# netns.sh — two "hosts" in network namespaces of this test's own, joined by a veth pair
# (10.77.0.1 and 10.77.0.2, reachable from nowhere else): ranks rendezvous and exchange
# activations across hosts, not over loopback, and train what pprun's 2 ranks train.
# Skipped (and says so) where network namespaces cannot be made (no root / no CAP_NET_ADMIN).
set -u
PPTRAIN=$(realpath "${PPTRAIN:-./pptrain}")
A=pptrainA$$ B=pptrainB$$
if ! command -v ip >/dev/null || ! ip netns add "$A" 2>/dev/null; then
  echo "netns.sh: skipped: cannot create network namespaces here"; exit 0
fi
tmp=$(mktemp -d /tmp/pptrain-netns.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  ip netns del "$A" 2>/dev/null; ip netns del "$B" 2>/dev/null; rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$B"
ip link add "v$A" type veth peer name "v$B"
ip link set "v$A" netns "$A"; ip link set "v$B" netns "$B"
ip -n "$A" addr add 10.77.0.1/24 dev "v$A"; ip -n "$B" addr add 10.77.0.2/24 dev "v$B"
for ns in "$A" "$B"; do ip -n "$ns" link set lo up; done
ip -n "$A" link set "v$A" up; ip -n "$B" link set "v$B" up

args=(--config test/configs/pipe8.yaml --set pipeline.stages=2 --set pipeline.microbatches=4 --set output.log_every=1)
ns=("$A" "$B")
for r in 0 1; do  # one "node" each: LOCAL_RANK 0 of 1 on both
  ip netns exec "${ns[$r]}" env RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=10.77.0.1 \
    MASTER_PORT=29611 timeout 120 "$PPTRAIN" "${args[@]}" --set output.dir="$tmp/n" >"$tmp/r$r.out" 2>&1 &
  pids+=($!)
done
wait "${pids[0]}"; rc0=$?
wait "${pids[1]}"; rc1=$?
pids=()
timeout 120 scripts/pprun --nproc-per-node 2 "$PPTRAIN" "${args[@]}" --set output.dir="$tmp/p" >"$tmp/p.out" 2>&1
if [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && cmp -s <(cut -d, -f1,2 "$tmp/n/losses.csv") <(cut -d, -f1,2 "$tmp/p/losses.csv"); then
  echo "ok   2 ranks on 2 network namespaces (10.77.0.1, 10.77.0.2): losses equal to a 1-host run"
  echo "netns.sh: 1 passed, 0 failed"
else
  echo "FAIL netns: rc $rc0/$rc1: $(tail -n 3 "$tmp/r0.out") | $(tail -n 3 "$tmp/r1.out")"
  echo "netns.sh: 0 passed, 1 failed"; exit 1
fi
