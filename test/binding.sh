#!/usr/bin/env bash
# binding.sh — runtime.threads 0 with 2 ranks on one node ([Note: thread share] in
# src/runtime/cpuset.h, issue 25, item 4): ranks bound to CPUs of their own (taskset, as SLURM's
# task binding does) each use all of their own and say that no other rank shares them;
# ranks sharing both CPUs divide them and say by how many; masks that overlap in part
# give each rank its share. Each through scripts/pprun, and the disjoint case also as
# srun starts tasks (SLURM_* variables, no RANK). On 2 CPUs every count is 1 either way
# (1 CPU / 2 ranks is clamped to 1), so the reason each rank prints is what tells the
# rules apart here; the counts on larger masks are test_cpuset's.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-binding.XXXXXX)
pids=()
trap '[ -n "${PP_KEEP:-}" ] || rm -rf "$tmp"; for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done' EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish

command -v taskset >/dev/null || skip_all "taskset not available"
cpus=($(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0))[:2])' 2>/dev/null))
[ ${#cpus[@]} -eq 2 ] || skip_all "needs 2 CPUs in this process's affinity mask"
a=${cpus[0]} b=${cpus[1]}
for v in $(compgen -e | grep -E '^SLURM_'); do unset "$v"; done
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT TORCHELASTIC_RUN_ID PPTRAIN_RDZV_PORT

args=(--config configs/gpt-tiny.yaml --set runtime.threads=0 --set train.steps=1 --set data.val_every=0
      --set runtime.timeout_s=30)
# pprun_bound NAME MASK0 MASK1: 2 ranks under pprun, rank r under taskset -c MASKr
pprun_bound() {
  local name=$1
  timeout -k 5 120 scripts/pprun --nproc-per-node 2 bash -c \
    "m=(\"$2\" \"$3\"); exec taskset -c \${m[\$LOCAL_RANK]} \"$PPTRAIN\" \"\$@\"" _ \
    "${args[@]}" --set output.dir="$tmp/$name" >"$tmp/$name.out" 2>&1
}
says() { grep -qF "rank $2: runtime.threads 0: $3" "$tmp/$1.out"; } # NAME RANK TEXT
got() { grep -m1 -o "rank $2: runtime.threads 0: .*" "$tmp/$1.out" || tail -n 2 "$tmp/$1.out"; }
expect() { # NAME RANK TEXT: rank RANK of run NAME printed TEXT
  if says "$1" "$2" "$3"; then ok "$1: rank $2: $3"; else bad "$1: rank $2: expected '$3', got: $(got "$1" "$2")"; fi
}

own="1 compute thread(s) (the 1 CPU(s) of its affinity mask, which no other rank on this node may run on)"
pprun_bound disjoint "$a" "$b"
check "disjoint masks under pprun: exit 0" "[ $? -eq 0 ]"
expect disjoint 0 "$own"
expect disjoint 1 "$own"

pprun_bound shared "$a,$b" "$a,$b"
check "shared masks under pprun: exit 0" "[ $? -eq 0 ]"
expect shared 0 "1 compute thread(s) (the 2 CPU(s) of its affinity mask, shared by 2 rank(s) on this node)"
expect shared 1 "1 compute thread(s) (the 2 CPU(s) of its affinity mask, shared by 2 rank(s) on this node)"

pprun_bound partial "$a,$b" "$a"
check "partly overlapping masks under pprun: exit 0" "[ $? -eq 0 ]"
expect partial 0 "1 compute thread(s) (its share of the 2 CPU(s) of its affinity mask, 1 of which other ranks"
expect partial 1 "1 compute thread(s) (the 1 CPU(s) of its affinity mask, shared by 2 rank(s) on this node)"

# As srun with --cpu-bind starts 2 tasks on one node: SLURM's variables, one CPU each.
port=$((20000 + RANDOM % 20000))
for r in 0 1; do
  m=$([ $r -eq 0 ] && echo "$a" || echo "$b")
  SLURM_JOB_ID=$port SLURM_STEP_ID=0 SLURM_PROCID=$r SLURM_LOCALID=$r SLURM_NODEID=0 SLURM_NTASKS=2 \
    SLURM_STEP_TASKS_PER_NODE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    timeout -k 5 120 taskset -c "$m" "$PPTRAIN" "${args[@]}" --set output.dir="$tmp/slurm" \
    >"$tmp/slurm.$r.out" 2>&1 &
  pids+=($!)
done
wait "${pids[0]}"; rc0=$?
wait "${pids[1]}"; rc1=$?
pids=()
cat "$tmp/slurm.0.out" "$tmp/slurm.1.out" >"$tmp/slurm.out"
check "SLURM tasks bound to a CPU each: exit 0 and 0 (got $rc0 and $rc1)" "[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ]"
expect slurm 0 "$own"
expect slurm 1 "$own"

finish
