#!/usr/bin/env bash
# outdir.sh — one run per output.dir ([Note: output.dir lock] in src/outdir.c) and the
# patterns of the path keys ([Note: path patterns] in src/pathpat.c), through the real
# binary: a second run started on a directory in use, with 1 and with 2 ranks, exits 2
# naming the first (host, pid, SLURM job) and touches nothing; once the first is killed
# with SIGKILL its lock is gone (the file stays) and --resume-if-present trains; after
# a run that ended normally --resume continues it. %j, %A, %a, %4a, %%, ${NAME} and $$
# expand in output.dir (a run writes where they say) and in the other path keys; an
# unset or empty variable and an unknown pattern exit 2 naming them.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-outdir.XXXXXX)
apid= # the long first run, killed by its PID at exit if still there
cleanup() { [ -n "$apid" ] && kill -9 "$apid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish
cfg=test/configs/pipe8.yaml
# A clean environment: none of the variables the patterns read, nor a launcher's.
for v in $(compgen -e | grep -E '^SLURM_|^SBATCH_|^SRUN_'); do unset "$v"; done
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT TORCHELASTIC_RUN_ID PP_OUTDIR_X
host=$(hostname)
has() { grep -qF -- "$2" "$1"; } # FILE TEXT

# ---- patterns ------------------------------------------------------------------------

# dir_of ARGS...: output.dir as --print-config prints it (env from the caller)
dir_of() { "$PPTRAIN" --config "$cfg" "$@" --print-config 2>&1 | sed -n 's/^  dir: *//p'; }
expands() { # LABEL WANT PATTERN [VAR=VALUE ...]
  local label=$1 want=$2 pat=$3 got
  shift 3
  got=$(env "$@" "$PPTRAIN" --config "$cfg" --set "output.dir=$pat" --print-config 2>&1 | sed -n 's/^  dir: *//p')
  check "$label: '$pat' -> $want (got $got)" '[ "$got" = "$want" ]'
}
expands "%j is SLURM_JOB_ID" runs/job-4242 'runs/job-%j' SLURM_JOB_ID=4242
expands "%A is SLURM_ARRAY_JOB_ID" runs/arr-4240 'runs/arr-%A' SLURM_ARRAY_JOB_ID=4240
expands "%a is SLURM_ARRAY_TASK_ID" runs/arr-7 'runs/arr-%a' SLURM_ARRAY_TASK_ID=7
expands "%4a zero-pads as sbatch" runs/arr-0007 'runs/arr-%4a' SLURM_ARRAY_TASK_ID=7
expands "%% is a literal % (printed doubled)" '"runs/100%%"' 'runs/100%%'
expands "\${NAME} is the environment variable" runs/scratch/x 'runs/${PP_OUTDIR_X}/x' PP_OUTDIR_X=scratch
expands "\$\$ is a literal \$ (printed doubled)" '"runs/$$x"' 'runs/$$x'
expands "all at once" runs/4240_7-4242 'runs/%A_%a-%j' SLURM_JOB_ID=4242 SLURM_ARRAY_JOB_ID=4240 SLURM_ARRAY_TASK_ID=7

refused() { # LABEL WANT-TEXT PATTERN [VAR=VALUE ...]: exit 2 saying WANT-TEXT
  local label=$1 text=$2 pat=$3 rc=0
  shift 3
  env "$@" "$PPTRAIN" --config "$cfg" --set "output.dir=$pat" --print-config >"$tmp/refused.out" 2>&1 || rc=$?
  check "$label: '$pat' exits 2 (rc $rc) saying \"$text\"" \
    '[ $rc -eq 2 ] && grep -qF -- "$text" "$tmp/refused.out"'
}
refused "%j outside a job" "%j (the environment variable SLURM_JOB_ID) is not set" 'runs/%j'
refused "%a outside an array" "%a (the environment variable SLURM_ARRAY_TASK_ID) is not set" 'runs/arr-%a' SLURM_JOB_ID=1
refused "%A outside an array" "%A (the environment variable SLURM_ARRAY_JOB_ID) is not set" 'runs/arr-%A' SLURM_JOB_ID=1
refused "an unset \${NAME}" '${PP_OUTDIR_X} (the environment variable PP_OUTDIR_X) is not set' 'runs/${PP_OUTDIR_X}'
refused "an empty \${NAME}" '${PP_OUTDIR_X} (the environment variable PP_OUTDIR_X) is empty' 'runs/${PP_OUTDIR_X}' PP_OUTDIR_X=
refused "an unknown %x" "'%x' is not a pattern pptrain expands" 'runs/%x'
refused "\$NAME without braces" "'\$HOME' is not a pattern pptrain expands" 'runs/$HOME'

# The other path keys expand too: a run reads data.train from ${NAME}.
mkdir -p "$tmp/data" && cp data/tiny/train.bin "$tmp/data/"
PP_OUTDIR_X=$tmp/data timeout 60 "$PPTRAIN" --config "$cfg" --set 'data.train=${PP_OUTDIR_X}/train.bin' \
  --set train.steps=2 --set "output.dir=$tmp/data-run" >"$tmp/data-run.out" 2>&1
check "data.train '\${PP_OUTDIR_X}/train.bin' is read from there (rc $?)" '[ -s "$tmp/data-run/losses.csv" ]'
rc=0
timeout 60 "$PPTRAIN" --config "$cfg" --set 'data.train=${PP_OUTDIR_X}/train.bin' --set "output.dir=$tmp/x" \
  >"$tmp/data-unset.out" 2>&1 || rc=$?
want="data.train '\${PP_OUTDIR_X}/train.bin': \${PP_OUTDIR_X} (the environment variable PP_OUTDIR_X) is not set"
check "data.train with \${PP_OUTDIR_X} unset: exit 2 naming data.train (rc $rc)" \
  '[ $rc -eq 2 ] && has "$tmp/data-unset.out" "$want"'

# A job array's tasks, each in its own directory (what issue 25 saw go wrong).
for task in 1 2; do
  SLURM_JOB_ID=$((4300 + task)) SLURM_ARRAY_JOB_ID=4300 SLURM_ARRAY_TASK_ID=$task timeout 60 "$PPTRAIN" \
    --config "$cfg" --set train.steps=3 --set "output.dir=$tmp/arr-%a" >"$tmp/arr-$task.out" 2>&1
done
check "two array tasks with output.dir arr-%a write arr-1 and arr-2, 3 rows each" \
  '[ "$(tail -n +2 "$tmp/arr-1/losses.csv" | wc -l)" = 3 ] && [ "$(tail -n +2 "$tmp/arr-2/losses.csv" | wc -l)" = 3 ] && [ ! -e "$tmp/arr-%a" ]'

# ---- the lock ------------------------------------------------------------------------

dir=$tmp/shared
# A: a long run (killed below), as SLURM job 4242; it has taken the lock once it logs.
SLURM_JOB_ID=4242 "$PPTRAIN" --config "$cfg" --set train.steps=1000000 --set output.log_every=1 \
  --set "output.dir=$dir" >"$tmp/a.out" 2>&1 &
apid=$!
for _ in $(seq 300); do [ -f "$dir/losses.csv" ] && [ "$(wc -l <"$dir/losses.csv")" -ge 3 ] && break; sleep 0.1; done
check "the first run is training (pid $apid)" 'kill -0 $apid 2>/dev/null && [ -s "$dir/losses.csv" ]'
check "output.dir/lock names its holder: pid $apid on host $host, SLURM job 4242" \
  'grep -qF "pid $apid on host $host, SLURM job 4242" "$dir/lock" 2>/dev/null'

# B: a second 1-rank run on the same directory
rc=0
t0=$SECONDS
timeout 60 "$PPTRAIN" --config "$cfg" --set train.steps=5 --set "output.dir=$dir" >"$tmp/b.out" 2>&1 || rc=$?
check "a second run on the directory exits 2 at once (rc $rc, $((SECONDS - t0)) s)" '[ $rc -eq 2 ] && [ $((SECONDS - t0)) -lt 20 ]'
check "its message names the first: pid $apid on host $host, SLURM job 4242" \
  'grep -qF "is in use by another run: pid $apid on host $host, SLURM job 4242" "$tmp/b.out"'
check "the first run still trains, its lock unchanged" \
  'kill -0 $apid 2>/dev/null && grep -qF "pid $apid on host" "$dir/lock"'

# B2: a second run of 2 ranks: both exit 2, rank 0 naming the holder
rc=0
timeout 120 scripts/pprun --nproc-per-node 2 "$PPTRAIN" --config "$cfg" --set pipeline.stages=2 --set train.steps=5 \
  --set "output.dir=$dir" >"$tmp/b2.out" 2>&1 || rc=$?
want0="[rank 0] error: output.dir '$dir' is in use by another run: pid $apid on host $host"
want1="[rank 1] error: output.dir '$dir' is in use by another run (rank 0 names it)"
check "a second run of 2 ranks exits 2 (rc $rc), rank 0 naming pid $apid, rank 1 saying it is in use" \
  '[ $rc -eq 2 ] && has "$tmp/b2.out" "$want0" && has "$tmp/b2.out" "$want1"'
check "neither second run wrote a checkpoint" '[ ! -e "$dir/checkpoints" ]'

# SIGKILL the first: the lock dies with it, the file stays
kill -9 "$apid"
wait "$apid" 2>/dev/null
killed=$apid apid=
check "after SIGKILL of the holder the lock file stays, naming it" 'has "$dir/lock" "pid $killed on host"'
# C: --resume-if-present on the directory of the killed run (no checkpoint: starts afresh)
rc=0
timeout 60 "$PPTRAIN" --config "$cfg" --set train.steps=10 --set "output.dir=$dir" --resume-if-present \
  >"$tmp/c.out" 2>&1 || rc=$?
check "after SIGKILL of the holder, a run with --resume-if-present trains (rc $rc), the lock then naming it" \
  '[ $rc -eq 0 ] && [ -e "$dir/checkpoints/latest" ] && ! has "$dir/lock" "pid $killed " && has "$dir/lock" "on host $host"'
# D: --resume after the run ended normally
rc=0
timeout 60 "$PPTRAIN" --config "$cfg" --set train.steps=15 --set "output.dir=$dir" --resume >"$tmp/d.out" 2>&1 || rc=$?
check "after a run ended normally, --resume continues it (rc $rc, steps 11-15)" \
  '[ $rc -eq 0 ] && grep -qF "resumed from" "$tmp/d.out" && [ "$(tail -n 1 "$dir/losses.csv" | cut -d, -f1)" = 15 ]'
finish
