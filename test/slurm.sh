#!/usr/bin/env bash
# slurm.sh — pptrain under a real SLURM (Debian's slurmctld, slurmd, munge), started on
# this machine by test/slurm/cluster.sh as a one-node and a two-node cluster: the batch
# script on 1 and 2 nodes and `srun -n 2` give pprun's losses bit for bit; preemption by
# `scancel -s USR1`, by the batch shell's `scancel --signal=USR1|TERM --batch`, by a job
# of a higher-priority partition (GraceTime), by `--signal=USR1@N` and
# `--signal=B:USR1@N` under a short time limit each saves, ends COMPLETED (or requeued)
# and the resumed losses equal an uninterrupted run's bit for bit; SIGTERM during the
# ranks' setup requeues the job; with PPTRAIN_RETRY_FAILED=1 a rank killed after a
# checkpoint requeues the job, which resumes, and one killed before any does not; a
# requeued run ends once it finishes; a plain ./pptrain in a 2-task batch script
# exits 2 at once naming srun; a killed rank fails the job within runtime.timeout_s; two
# jobs at once on one node do not collide; a job array's output.dir arr-%A_%a is one
# directory per task, and a second job on a running job's directory fails at once naming
# it; a node lost whole ends the job PPTRAIN_FAIL_GRACE s after its rank failed. Before
# the cluster, checks that need no
# SLURM: the batch shell's environment, a rank of another job at the rendezvous, the
# [rank R] prefix of environment errors, threads from the CPU affinity mask.
# Needs root (it installs the packages where missing, and adds two names to /etc/hosts,
# removed at the end); skips, saying why, where it cannot run.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
PPTRAIN=$(cd "$(dirname "$PPTRAIN")" && pwd)/$(basename "$PPTRAIN")
export PPTRAIN
cd "$(dirname "$0")/.." || exit 1 # the repository root: jobs run where they are submitted
SL=$(mktemp -d /tmp/pptrain-slurm.XXXXXX)
R=$SL/runs
mkdir -p "$R"
pass=0 fail=0 skips=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; return 1; fi; }
skip_part() { skips=$((skips + 1)); echo "skip $1"; [ -z "${PP_TEST_SKIPS:-}" ] || echo "$1" >>"$PP_TEST_SKIPS"; }
finish() {
  echo "slurm.sh: $pass passed, $fail failed$([ $skips -eq 0 ] || echo ", $skips skipped")"
  [ $fail -eq 0 ] || exit 1
  [ $pass -gt 0 ] || exit 77
  exit 0
}
bg=() # background processes of this script (pprun runs), stopped at exit if still there
# shellcheck source=slurm/cluster.sh
. test/slurm/cluster.sh
# stop_bg: end the background runs still running (jobs -p: not yet reaped, so the PIDs
# are still theirs). `timeout CMD &` leads a process group of its own, which a signal to
# the test's group does not reach: SIGTERM to that group (pprun passes it to its ranks,
# which stop), SIGKILL to what is left after 10 s.
stop_bg() {
  local p live=()
  for p in $(jobs -p); do [[ " ${bg[*]} " == *" $p "* ]] && live+=("$p"); done
  [ ${#live[@]} -gt 0 ] || return 0
  for p in "${live[@]}"; do kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; done
  sl_wait_gone "${live[@]}"
  # only groups whose leader is still there (an unreaped child: its PID is still its own)
  for p in "${live[@]}"; do
    kill -0 "$p" 2>/dev/null && { kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null; }
  done
}
cleanup() {
  stop_bg
  slurm_stop
  if [ -n "${PP_SLURM_KEEP:-}" ]; then echo "slurm.sh: kept $SL"; else rm -rf "$SL"; fi
}
trap cleanup EXIT
# A clean launch environment, also when this runs inside someone's SLURM job.
for v in $(compgen -e | grep -E '^SLURM_|^SBATCH_|^SRUN_|^SALLOC_'); do unset "$v"; done
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT TORCHELASTIC_RUN_ID \
  PPTRAIN_RDZV_PORT PPTRAIN_JOB_TOKEN PPTRAIN_REQUEUE PPTRAIN_RETRY_FAILED PPTRAIN_FAIL_GRACE CONFIG

rows() { tail -n +2 "$1/losses.csv" 2>/dev/null | cut -d, -f1,2; }            # DIR
nrows() { rows "$1" | wc -l; }                                                   # DIR
same_rows() { [ -n "$(rows "$1")" ] && cmp -s <(rows "$1" | head -n "$3") <(rows "$2" | head -n "$3"); } # A B N
same_weights() { # A B: the final checkpoints hold the same weights, bit for bit
  "$PPTRAIN" export --checkpoint "$1/checkpoints" --out "$1.bin" >/dev/null 2>&1 &&
    "$PPTRAIN" export --checkpoint "$2/checkpoints" --out "$2.bin" >/dev/null 2>&1 && cmp -s "$1.bin" "$2.bin"
}
pprun_ref() { # NAME ARGS...: pprun's 2-rank run into $R/NAME
  local name=$1
  shift
  timeout 300 scripts/pprun --nproc-per-node 2 "$PPTRAIN" "$@" --set output.dir="$R/$name" >"$R/$name.out" 2>&1
}

# ------------------------------------------------------------ without a cluster --

# The batch shell of `#SBATCH -n 2` (SLURM_PROCID=0, SLURM_NTASKS=2, no SLURM_STEP_ID):
# a pptrain started there exits 2 at once naming srun.
t0=$SECONDS
SLURM_JOB_ID=77 SLURM_PROCID=0 SLURM_NTASKS=2 MASTER_ADDR=127.0.0.1 timeout 15 "$PPTRAIN" \
  --config configs/gpt-tiny.yaml --set runtime.timeout_s=10 --set output.dir="$R/env-batch" >"$R/env-batch.out" 2>&1
rc=$?
check "batch shell environment (no job step): exit 2 at once naming srun (rc $rc, $((SECONDS - t0)) s)" \
  test $rc -eq 2 -a $((SECONDS - t0)) -lt 10 -a -n "$(grep -F 'start the ranks with srun' "$R/env-batch.out")"
SLURM_JOB_ID=77 SLURM_NTASKS=2 timeout 15 "$PPTRAIN" --config configs/gpt-tiny.yaml \
  --set output.dir="$R/env-alloc" >"$R/env-alloc.out" 2>&1
rc=$?
check "SLURM_NTASKS=2 outside a step (salloc shell): exit 2 naming srun (rc $rc)" \
  test $rc -eq 2 -a -n "$(grep -F srun "$R/env-alloc.out")"

# Errors in the environment carry the rank once it is known.
RANK=3 WORLD_SIZE=4 "$PPTRAIN" --config configs/gpt-tiny.yaml >/dev/null 2>"$R/prefix.err"
check "\"[rank 3] error: MASTER_ADDR is not set\"" grep -qF "[rank 3] error: MASTER_ADDR is not set" "$R/prefix.err"
SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_STEP_ID=0 SLURM_JOB_ID=5 "$PPTRAIN" --config configs/gpt-tiny.yaml >/dev/null 2>"$R/prefix2.err"
check "SLURM: \"[rank 1] error: MASTER_ADDR is not set ... scontrol show hostnames\"" \
  grep -qF "[rank 1] error: MASTER_ADDR is not set: rank 1 of 2 needs rank 0's host to rendezvous — export it in the batch script: export MASTER_ADDR=\$(scontrol show hostnames" "$R/prefix2.err"

# runtime.threads 0 counts the CPUs of the affinity mask (taskset, SLURM), not the host's.
if command -v taskset >/dev/null && [ "$(nproc --all)" -ge 2 ]; then
  threads() { "$@" "$PPTRAIN" --config test/configs/pipe8.yaml --set runtime.threads=0 --set train.steps=1 \
    --set output.dir="$R/threads-$RANDOM" | sed -n 's/.*runtime.threads 0: \([0-9]*\) compute thread.*/\1/p'; }
  t1=$(threads taskset -c 0) tall=$(threads env)
  check "runtime.threads 0 under taskset -c 0: ${t1:-no} thread(s), 1 expected" test "${t1:-0}" = 1
  check "runtime.threads 0 without a mask: ${tall:-no} thread(s), $(nproc) expected" test "${tall:-0}" = "$(nproc)"
else
  skip_part "runtime.threads from the affinity mask: needs taskset and 2 CPUs"
fi

# A rank of another job that reaches this job's rendezvous port (two jobs, one port) is
# refused alone, with a message naming both jobs; this job goes on when its own rank 1
# comes. With and without a shared job token.
another_job() { # TOKEN
  local port p0 rc1 rc0
  port=$(free_port)
  fake() { env SLURM_JOB_ID="$1" SLURM_STEP_ID=0 SLURM_PROCID="$2" SLURM_NTASKS=2 SLURM_NODEID=0 \
    SLURM_STEP_TASKS_PER_NODE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" PPTRAIN_JOB_TOKEN="$3" \
    timeout 60 "$PPTRAIN" --config test/configs/pipe8.yaml --set pipeline.stages=2 --set train.steps=3 \
    --set runtime.timeout_s=20 --set output.dir="$R/job$1-$4"; }
  fake 100 0 "$1" "${1:+tok}" >"$R/job100.out" 2>&1 &
  p0=$!
  bg+=($p0)
  fake 101 1 "$1" "${1:+tok}" >"$R/job101.out" 2>&1
  rc1=$?
  fake 100 1 "$1" "${1:+tok}" >"$R/job100-1.out" 2>&1
  wait $p0
  rc0=$?
  check "another job's rank at the rendezvous${1:+ (same token)}: it exits 2 (rc $rc1) saying so" \
    grep -qF "rank 1 of SLURM job 101 step 0 reached the rendezvous of another job (SLURM job 100 step 0)" "$R/job101.out"
  [ $rc1 -eq 2 ] || bad "  ...and exit code 2, not $rc1"
  check "...rank 0 drops it and its job finishes with its own rank 1 (rc $rc0)" \
    test $rc0 -eq 0 -a -n "$(grep -F 'reached the rendezvous of another job' "$R/job100.out")"
}
another_job ""
another_job "shared-token-0123456789abcdef"

# ---------------------------------------------------------------- the cluster --

if [ "$(id -u)" -ne 0 ]; then skip_part "SLURM cluster: needs root (to install and start slurmctld/slurmd/munged)"; finish; fi
if ! slurm_install; then skip_part "SLURM cluster: $SL_WHY"; finish; fi
if ! slurm_start; then skip_part "SLURM cluster: $SL_WHY"; finish; fi
echo "     SLURM $(sinfo -V | cut -d' ' -f2): nodes $SL_NODE0 $SL_NODE1 up ($SLURM_CONF)"

# job_wait JOB SECONDS: poll until JOB has ended; sets ST (JobState), EXIT (ExitCode) and
# RESTARTS. A requeued job is held ~2 minutes (BeginTime) before SLURM starts it again:
# the wait releases that hold (StartTime=now) after 3 s — not at once: slurmd refuses a
# job's launch credential made in the second its previous run was revoked ("Job
# credential revoked"). Returns 1 if the job did not end in time.
job_wait() {
  local j=$1 lim=$2 t0=$SECONDS line held=""
  while :; do
    line=$(scontrol -o show job "$j" 2>/dev/null)
    ST=$(sed -n 's/.* JobState=\([A-Z_]*\) .*/\1/p' <<<"$line")
    EXIT=$(sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p' <<<"$line")
    RESTARTS=$(sed -n 's/.* Restarts=\([0-9]*\) .*/\1/p' <<<"$line")
    case $ST in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED) return 0 ;; esac
    [ $((SECONDS - t0)) -lt "$lim" ] || return 1
    if [ "$ST" = PENDING ] && grep -q "Reason=BeginTime" <<<"$line"; then
      held=${held:-$SECONDS}
      [ $((SECONDS - held)) -lt 3 ] || scontrol update JobId="$j" StartTime=now 2>/dev/null
    else
      held=""
    fi
    sleep 0.3
  done
}
# wait_rows DIR N SECONDS: until DIR/losses.csv has N rows.
wait_rows() {
  local t0=$SECONDS
  while [ "$(nrows "$1")" -lt "$2" ]; do [ $((SECONDS - t0)) -lt "$3" ] || return 1; sleep 0.1; done
}
job_ok() { # WHAT [LOG]: the last job_wait ended COMPLETED 0:0 (else show the log's end)
  check "$1: $ST $EXIT, restarts ${RESTARTS:-?}" test "$ST" = COMPLETED -a "$EXIT" = 0:0 ||
    { [ -z "${2:-}" ] || tail -n 8 "$2" | sed 's/^/     | /'; }
}
rank1_pid() { # JOB: the PID of the job's rank 1 (scontrol listpids: PID JOBID STEPID LOCALID GLOBALID)
  local p
  for p in $(scontrol listpids "$1" 2>/dev/null | awk '$5 == 1 {print $1}'); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = pptrain ] && echo "$p"
  done | head -n 1
}
saved_requeued() { # WHAT LOG SIG: the last job_wait's job saved on SIG before step $S, was
  # requeued once and finished (COMPLETED 0:0)
  local stopped saved_at
  stopped=$(grep -o "stopped on $3 after step [0-9]*" "$2" | head -n 1)
  job_ok "$1: ${stopped:-not stopped}, requeued, finished" "$2"
  saved_at=${stopped##* }
  check "...it saved on $3 before step $S and was requeued once (restarts $RESTARTS)" \
    test "${saved_at:-$S}" -lt $S -a "$RESTARTS" = 1
}

# 1. The batch script on one node and on two, and srun -n 2, give pprun's losses.
tiny=(--config configs/gpt-tiny.yaml --set train.steps=20)
pprun_ref ref-tiny "${tiny[@]}" || bad "pprun reference run failed: $(tail -n 3 "$R/ref-tiny.out")"
j=$(CONFIG=configs/gpt-tiny.yaml sbatch --parsable -o "$R/one.log" --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 \
  --gpus-per-node=0 scripts/slurm/pptrain.sbatch --set train.steps=20 --set output.dir="$R/one")
job_wait "$j" 60
job_ok "sbatch pptrain.sbatch, 1 node x 2 ranks" "$R/one.log"
check "...losses ($(nrows "$R/one") rows) and final weights equal pprun's bitwise" \
  test -n "$(same_rows "$R/one" "$R/ref-tiny" 20 && same_weights "$R/one" "$R/ref-tiny" && echo y)"
j=$(CONFIG=configs/gpt-tiny.yaml sbatch --parsable -o "$R/two.log" --partition=two --nodes=2 --ntasks-per-node=1 \
  --cpus-per-task=1 --gpus-per-node=0 scripts/slurm/pptrain.sbatch --set train.steps=20 --set output.dir="$R/two")
job_wait "$j" 60
job_ok "sbatch pptrain.sbatch, 2 nodes x 1 rank" "$R/two.log"
check "...losses ($(nrows "$R/two") rows) and final weights equal pprun's bitwise" \
  test -n "$(same_rows "$R/two" "$R/ref-tiny" 20 && same_weights "$R/two" "$R/ref-tiny" && echo y)"
check "...one rank on each node" grep -qF "2 ranks on 2 node(s)" "$R/two.log"
# the README's two lines, inside an allocation (salloc)
timeout 120 salloc --ntasks=2 bash -c 'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
  srun --ntasks=2 "$PPTRAIN" --config configs/gpt-tiny.yaml --set train.steps=20 --set output.dir="$0"' \
  "$R/srun" >"$R/srun.log" 2>&1
rc=$?
check "srun --ntasks=2 (rc $rc): losses and final weights equal pprun's bitwise" \
  test $rc -eq 0 -a -n "$(same_rows "$R/srun" "$R/ref-tiny" 20 && same_weights "$R/srun" "$R/ref-tiny" && echo y)"

# 2. Two jobs at once on one node (no MASTER_PORT: each derives its own from its job id).
for k in 1 2; do
  MASTER_ADDR=$SL_NODE0 timeout 120 srun --ntasks=2 --cpus-per-task=1 "$PPTRAIN" --config configs/gpt-tiny.yaml \
    --set train.steps=100 --set output.log_every=1 --set output.dir="$R/both$k" >"$R/both$k.log" 2>&1 &
  bg+=($!)
done
wait "${bg[-2]}"; rc1=$?
wait "${bg[-1]}"; rc2=$?
check "two srun jobs at once on one node: both finish (rc $rc1, $rc2) with equal losses" \
  test $rc1 -eq 0 -a $rc2 -eq 0 -a "$(nrows "$R/both1")" -eq 100 -a -n "$(same_rows "$R/both1" "$R/both2" 100 && echo y)"

# 3. The common mistake: pptrain started by a 2-task batch script without srun.
t0=$SECONDS
j=$(sbatch --parsable -o "$R/plain.log" test/slurm/plain.sbatch --set output.dir="$R/plain" --set runtime.timeout_s=60)
job_wait "$j" 30
check "plain ./pptrain in an -n 2 batch script: FAILED 2:0 ($ST $EXIT) in $((SECONDS - t0)) s, naming srun" \
  test "$ST" = FAILED -a "$EXIT" = 2:0 -a $((SECONDS - t0)) -lt 20 -a -n "$(grep -F 'start the ranks with srun' "$R/plain.log")"

# 4. A rank killed mid-run ends the job FAILED within runtime.timeout_s (10 s here).
long=(--set pipeline.stages=2 --set train.steps=1000000 --set train.lr_schedule.decay=constant)
j=$(CONFIG=test/configs/pipe8.yaml sbatch --parsable -o "$R/kill.log" --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 \
  --gpus-per-node=0 scripts/slurm/pptrain.sbatch "${long[@]}" --set runtime.timeout_s=10 --set output.dir="$R/kill")
victim=
wait_rows "$R/kill" 2 60 && victim=$(rank1_pid "$j")
if [ -n "$victim" ]; then
  t0=$SECONDS
  kill -KILL "$victim"
  job_wait "$j" 40
  check "rank 1 killed (pid $victim): job $ST $EXIT after $((SECONDS - t0)) s (limit 10 s)" \
    test "$ST" = FAILED -a $((SECONDS - t0)) -le 10
  check "...not requeued, no interrupted marker" test "${RESTARTS:-1}" = 0 -a ! -e "$R/kill/interrupted"
else
  bad "rank 1 of the kill job not found: $(tail -n 3 "$R/kill.log")"
  scancel "$j"
fi

# 6, started here: its two jobs wait 60-90 s for the time limit's notice, on node 1, while
#    parts 5 to 5c run on node 0. They and their reference run at nice 19 (a wrapper as
#    PPTRAIN), so that they take the cores only when parts 5 to 5c leave them idle.
printf '#!/bin/sh\nexec nice -n 19 "%s" "$@"\n' "$PPTRAIN" >"$SL/pptrain-nice"
chmod 755 "$SL/pptrain-nice"
big=(--set pipeline.stages=2 --set train.steps=100000000 --set train.lr_schedule.decay=constant)
timeout 300 scripts/pprun --nproc-per-node 2 "$SL/pptrain-nice" --config test/configs/pipe8.yaml "${big[@]}" \
  --set output.dir="$R/ref-big" >"$R/ref-big.out" 2>&1 &
refpid=$!
bg+=($refpid)
jobs_at=()
for sig in USR1@30 B:USR1@30; do
  jobs_at+=($(PPTRAIN="$SL/pptrain-nice" PPTRAIN_REQUEUE=0 CONFIG=test/configs/pipe8.yaml sbatch --parsable \
    -o "$R/at-${sig%%@*}.log" --time=2 --signal=$sig --partition=two --nodelist="$SL_NODE1" --nodes=1 \
    --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=0 scripts/slurm/pptrain.sbatch "${big[@]}" \
    --set output.dir="$R/at-${sig%%@*}"))
done

# 5. Preemption, the notice sent now: by scancel -s USR1 (to every rank), by
#    scancel --signal=USR1 --batch (to the batch shell, which passes it on) and by
#    scancel --signal=TERM --batch (passed on as SIGUSR1: srun kills its step on a
#    SIGTERM of its own). Each run saves, is requeued, resumes and finishes; the losses
#    equal the uninterrupted run's.
S=1500
pre=(--set pipeline.stages=2 --set train.steps=$S --set train.lr_schedule.decay=constant)
pprun_ref ref-pre --config test/configs/pipe8.yaml "${pre[@]}" || bad "pprun reference failed: $(tail -n 3 "$R/ref-pre.out")"
for form in "-s USR1" "--signal=USR1 --batch" "--signal=TERM --batch"; do
  case $form in -s*) name=pre-tasks ;; *USR1*) name=pre-batch ;; *) name=pre-batch-term ;; esac
  # the batch form's output.dir needs YAML quoting (a space, a quote, a backslash): the
  # batch script must still find its interrupted marker to requeue
  dir=$R/$name; [ "$name" = pre-tasks ] || dir="$R/$name \"q\" \\b"
  j=$(CONFIG=test/configs/pipe8.yaml sbatch --parsable -o "$R/$name.log" --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 \
    --gpus-per-node=0 scripts/slurm/pptrain.sbatch "${pre[@]}" --set output.dir="$dir")
  wait_rows "$dir" 3 60 || bad "scancel $form: no losses after 60 s: $(tail -n 3 "$R/$name.log")"
  scancel $form "$j"
  job_wait "$j" 120
  saved_requeued "scancel $form" "$R/$name.log" SIGUSR1
  check "...losses equal the uninterrupted run's bitwise ($(nrows "$dir") rows)" \
    test "$(nrows "$dir")" -eq $S -a -n "$(same_rows "$dir" "$R/ref-pre" $S && echo y)"
  check "...the finished run left no interrupted marker" test ! -e "$dir/interrupted"
  [ "$name" != pre-batch-term ] ||
    check "...the batch shell passed the SIGTERM on as SIGUSR1, not killed by srun" \
      test -n "$(grep -F 'got SIGTERM: passing it to the ranks as SIGUSR1' "$R/$name.log")" \
      -a -z "$(grep -F 'forcing job termination' "$R/$name.log")"
done
# the same command on the finished run: nothing to do, not requeued
j=$(CONFIG=test/configs/pipe8.yaml sbatch --parsable -o "$R/again.log" --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 \
  --gpus-per-node=0 scripts/slurm/pptrain.sbatch "${pre[@]}" --set output.dir="$R/pre-tasks")
job_wait "$j" 60
job_ok "the same command again on the finished run" "$R/again.log"
check "...nothing to do, not requeued (restarts $RESTARTS)" \
  test "$RESTARTS" = 0 -a -n "$(grep -F 'nothing to do' "$R/again.log")"

# 5a. Preemption by a job of higher priority (PreemptType=preempt/partition_prio: the
#     job in partition low, GraceTime=60, PreemptMode=REQUEUE; the preemptor in high
#     needs the whole node): SLURM sends SIGTERM to the ranks, not to srun or the batch
#     shell, at the start of the grace time. The ranks save and stop, the job requeues
#     itself, runs again once the preemptor has ended, and finishes with the losses of the
#     uninterrupted run.
dir=$R/preempted
j=$(CONFIG=test/configs/pipe8.yaml sbatch --parsable -o "$R/preempted.log" --partition=low --nodes=1 --ntasks-per-node=2 \
  --cpus-per-task=1 --gpus-per-node=0 scripts/slurm/pptrain.sbatch "${pre[@]}" --set output.dir="$dir")
wait_rows "$dir" 3 60 || bad "the job to preempt: no losses after 60 s: $(tail -n 3 "$R/preempted.log")"
h=$(sbatch --parsable -o "$R/preemptor.log" --partition=high --exclusive --nodes=1 --ntasks=4 --wrap 'echo ran; sleep 1')
job_wait "$j" 120
saved_requeued "preempted by job $h (partition high)" "$R/preempted.log" SIGTERM
check "...the SIGTERM reached the ranks only: neither srun (forcing job termination) nor the batch shell got it" \
  test -z "$(grep -e 'forcing job termination' -e 'pptrain.sbatch: got SIG' "$R/preempted.log")"
job_wait "$h" 30
check "...the preemptor ran ($ST $EXIT)" test "$ST" = COMPLETED -a -n "$(grep -Fx ran "$R/preemptor.log")"
check "...losses equal the uninterrupted run's bitwise ($(nrows "$dir") rows), no interrupted marker left" \
  test "$(nrows "$dir")" -eq $S -a -n "$(same_rows "$dir" "$R/ref-pre" $S && echo y)" -a ! -e "$dir/interrupted"

# 5b. Preemption during the ranks' setup: SIGTERM to the ranks (scancel -s TERM) while they
#     check a slow token file (2^31-1 tokens in a sparse file: ~20 s of reading zeros).
#     They stop at once, exit 143, nothing trained ([Note: a signal during setup] in
#     src/main.c), and the job requeues itself, as for a notice before srun started them.
#     The requeued run is cancelled here.
python3 - "$R/slow.bin" <<'PY'
import struct, sys
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240801, 7, 2**31 - 1, *[0] * 253))  # uint32 tokens
    f.truncate(1024 + 4 * (2**31 - 1))  # a hole: no blocks on disk
PY
j=$(CONFIG=test/configs/pipe8.yaml sbatch --parsable -o "$R/setup.log" --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 \
  --gpus-per-node=0 scripts/slurm/pptrain.sbatch --set pipeline.stages=2 --set data.train="$R/slow.bin" \
  --set data.val=null --set output.dir="$R/setup")
for i in $(seq 600); do [ -e "$R/setup/lock" ] && break; sleep 0.1; done # the ranks' handlers are in
sleep 0.5
scancel -s TERM "$j"
for i in $(seq 300); do grep -q "requeueing job\|requeue refused" "$R/setup.log" 2>/dev/null && break; sleep 0.1; done
# the batch script logs "requeueing job" before `scontrol requeue` returns: slurmctld counts
# the restart a moment later (a CI run once read Restarts=0 right after the line)
for i in $(seq 50); do
  RESTARTS=$(scontrol -o show job "$j" 2>/dev/null | sed -n 's/.* Restarts=\([0-9]*\) .*/\1/p')
  [ "${RESTARTS:-0}" -ge 1 ] && break
  sleep 0.1
done
check "SIGTERM during the ranks' setup: both stopped at once, nothing trained ($(grep -c 'during setup (before the first step): stopping' "$R/setup.log") of 2 said so)" \
  test "$(grep -c 'during setup (before the first step): stopping' "$R/setup.log")" = 2 -a ! -e "$R/setup/losses.csv"
check "...the job requeued itself (restarts ${RESTARTS:-?}): $(grep -o 'the ranks were stopped during.*' "$R/setup.log" | head -n 1)" \
  test "${RESTARTS:-0}" = 1 -a -n "$(grep -F "the ranks were stopped during their setup" "$R/setup.log")"
scancel "$j" 2>/dev/null
job_wait "$j" 30 || bad "the requeued job $j did not end after scancel"
rm -f "$R/slow.bin"

# 5c. PPTRAIN_RETRY_FAILED=1: rank 1 killed after the checkpoint of step 200 (every 100
#     steps): the job is requeued, resumes from its latest checkpoint and finishes with
#     the uninterrupted losses. Killed before the run's first checkpoint (every 1000
#     steps): no progress, not requeued, FAILED as without the setting.
for when in late early; do
  dir=$R/retry-$when
  retry=(--set output.checkpoint_every=$([ $when = late ] && echo 100 || echo 1000) --set runtime.timeout_s=10)
  j=$(PPTRAIN_RETRY_FAILED=1 CONFIG=test/configs/pipe8.yaml sbatch --parsable -o "$R/retry-$when.log" --nodes=1 \
    --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=0 scripts/slurm/pptrain.sbatch "${pre[@]}" "${retry[@]}" \
    --set output.dir="$dir")
  victim=
  if [ $when = late ]; then # until a checkpoint past step 100
    for i in $(seq 600); do
      [ "$(readlink "$dir/checkpoints/latest" 2>/dev/null | sed 's/^step_0*//')" -gt 100 ] 2>/dev/null && break
      sleep 0.1
    done
  fi
  wait_rows "$dir" 20 60 && victim=$(rank1_pid "$j")
  if [ -z "$victim" ]; then bad "PPTRAIN_RETRY_FAILED ($when): rank 1 not found: $(tail -n 3 "$R/retry-$when.log")"; scancel "$j"; continue; fi
  kill -KILL "$victim"
  job_wait "$j" 120
  if [ $when = late ]; then
    saved=$(grep -o 'after saving step [0-9]*' "$R/retry-$when.log" | head -n 1 | cut -d' ' -f4)
    job_ok "PPTRAIN_RETRY_FAILED=1, rank 1 killed after the checkpoint of step ${saved:-?}: requeued, finished" \
      "$R/retry-$when.log"
    check "...requeued once (restarts $RESTARTS) from a step past 100; losses ($(nrows "$dir") rows) equal the uninterrupted run's bitwise" \
      test "$RESTARTS" = 1 -a "${saved:-0}" -gt 100 -a "$(nrows "$dir")" -eq $S -a -n "$(same_rows "$dir" "$R/ref-pre" $S && echo y)"
  else
    check "PPTRAIN_RETRY_FAILED=1, rank 1 killed before the first checkpoint: $ST $EXIT, restarts $RESTARTS, saying why" \
      test "$ST" = FAILED -a "$RESTARTS" = 0 -a -n "$(grep -F 'no checkpoint was saved since step 0' "$R/retry-$when.log")"
  fi
done

# 6. Preemption by the time limit: --signal=USR1@30 (to every rank) and --signal=B:USR1@30
#    (to the batch shell) with --time=2. SLURM may send the notice up to 60 s early
#    (sbatch(1), --signal), at a time-limit check (every 30 s): so 30-60 s into the job,
#    never before its step runs (with --time=1 it came at once, before srun had started
#    the ranks: the notice to the ranks was lost, the one to the batch shell stopped the
#    job before it trained). The uninterrupted reference
#    trains beside them and stops once it is past them. Without requeue
#    (PPTRAIN_REQUEUE=0), the same command submitted again continues the run. The jobs
#    and the reference were started before part 5 (below part 4), so that their wait
#    for the notice runs beside parts 5 to 5c.
most=0
for i in 0 1; do
  sig=$([ $i = 0 ] && echo USR1@30 || echo B:USR1@30)
  name=at-${sig%%@*}
  job_wait "${jobs_at[i]}" 120
  job_ok "--time=2 --signal=$sig: $(cat "$R/$name/interrupted" 2>/dev/null || echo 'no interrupted marker')" "$R/$name.log"
  last[i]=$(rows "$R/$name" | tail -n 1 | cut -d, -f1)
  check "...saved on the signal (interrupted marker at step ${last[i]:-none})" \
    grep -qF "after step ${last[i]:-x};" "$R/$name/interrupted"
  [ "${last[i]:-0}" -gt $most ] && most=${last[i]}
done
more=10
wait_rows "$R/ref-big" $((most + more)) 120 || bad "the reference run did not reach step $((most + more))"
kill -TERM $refpid 2>/dev/null
wait $refpid
for i in 0 1; do
  sig=$([ $i = 0 ] && echo USR1@30 || echo B:USR1@30)
  name=at-${sig%%@*}
  want=$((${last[i]:-0} + more))
  j=$(PPTRAIN_REQUEUE=0 CONFIG=test/configs/pipe8.yaml sbatch --parsable -o "$R/$name.log" --nodes=1 --ntasks-per-node=2 \
    --cpus-per-task=1 --gpus-per-node=0 scripts/slurm/pptrain.sbatch "${big[@]}" --set train.steps=$want \
    --set output.dir="$R/$name")
  job_wait "$j" 60
  job_ok "--signal=$sig: the same command again resumes and finishes" "$R/$name.log"
  check "...losses of steps 1-$want equal the uninterrupted run's bitwise" \
    test "$(nrows "$R/$name")" -eq $want -a -n "$(same_rows "$R/$name" "$R/ref-big" $want && echo y)"
done

# 7. A job array with output.dir arr-%A_%a (sbatch expands the patterns only in its -o;
#    pptrain expands them itself): each task trains into a directory of its own, which
#    the batch script names. A second job on the directory of a running one fails at
#    once (2:0) naming the first's host, pid and job; once the first ended (scancel: it
#    saves), the same command resumes it.
arr=$(CONFIG=test/configs/pipe8.yaml sbatch --parsable --array=1-2 -o "$R/arr-%A_%a.log" --nodes=1 --ntasks-per-node=2 \
  --cpus-per-task=1 --gpus-per-node=0 scripts/slurm/pptrain.sbatch --set pipeline.stages=2 --set train.steps=20 \
  --set output.dir="$R/arr-%A_%a")
for t in 1 2; do
  job_wait "${arr}_$t" 60
  job_ok "job array task $t with output.dir $R/arr-%A_%a" "$R/arr-${arr}_$t.log"
  check "...trained into arr-${arr}_$t ($(nrows "$R/arr-${arr}_$t") rows), the batch script naming it" \
    test "$(nrows "$R/arr-${arr}_$t")" -eq 20 -a -n "$(grep -F "output.dir $R/arr-${arr}_$t," "$R/arr-${arr}_$t.log")"
done
check "...and nothing into a directory named arr-%A_%a" test ! -e "$R/arr-%A_%a"
lock=(--set pipeline.stages=2 --set train.lr_schedule.decay=constant --set output.dir="$R/locked")
j1=$(PPTRAIN_REQUEUE=0 CONFIG=test/configs/pipe8.yaml sbatch --parsable -o "$R/locked1.log" --nodes=1 --ntasks-per-node=2 \
  --cpus-per-task=1 --gpus-per-node=0 scripts/slurm/pptrain.sbatch "${lock[@]}" --set train.steps=1000000)
wait_rows "$R/locked" 2 60 || bad "the first job on $R/locked did not train: $(tail -n 3 "$R/locked1.log")"
t0=$SECONDS
j2=$(CONFIG=test/configs/pipe8.yaml sbatch --parsable -o "$R/locked2.log" --nodes=1 --ntasks-per-node=2 \
  --cpus-per-task=1 --gpus-per-node=0 scripts/slurm/pptrain.sbatch "${lock[@]}" --set train.steps=1000000)
job_wait "$j2" 30
check "a second job on the directory of running job $j1: $ST $EXIT in $((SECONDS - t0)) s, naming job $j1" \
  test "$ST" = FAILED -a "$EXIT" = 2:0 -a -n "$(grep -F "is in use by another run: pid" "$R/locked2.log" | grep -F ", SLURM job $j1,")"
scancel -s USR1 "$j1"
job_wait "$j1" 60
job_ok "...the first job, sent USR1: saved and stopped (PPTRAIN_REQUEUE=0)" "$R/locked1.log"
n=$(rows "$R/locked" | tail -n 1 | cut -d, -f1)
j3=$(CONFIG=test/configs/pipe8.yaml sbatch --parsable -o "$R/locked3.log" --nodes=1 --ntasks-per-node=2 \
  --cpus-per-task=1 --gpus-per-node=0 scripts/slurm/pptrain.sbatch "${lock[@]}" --set train.steps=$((${n:-0} + 5)))
job_wait "$j3" 60
job_ok "...then the same command resumes it at step ${n:-?} and trains 5 more steps" "$R/locked3.log"

# 8. A node lost whole (its slurmd, the step's daemon and its rank SIGKILLed, by the PIDs
#    this test started or found under the step): rank 0 fails at once, but srun waits for
#    the dead node's step daemon until SlurmdTimeout (300 s). The batch script's watchdog
#    ends the step PPTRAIN_FAIL_GRACE s (5 here) after the failure and fails the job,
#    saying so. Last: node 1 stays down. The job leaves RUNNING for FAILED; it is shown
#    COMPLETING (ExitCode 1:0) while the dead node cannot confirm its end.
grace=5
j=$(PPTRAIN_FAIL_GRACE=$grace PPTRAIN_REQUEUE=0 CONFIG=test/configs/pipe8.yaml sbatch --parsable -o "$R/lost.log" \
  --partition=two --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 --gpus-per-node=0 scripts/slurm/pptrain.sbatch \
  "${long[@]}" --set runtime.timeout_s=10 --set output.dir="$R/lost")
rank1= stepd1=
if wait_rows "$R/lost" 2 60; then
  for p in /proc/[0-9]*; do # rank 1's pptrain (on node 1) and its parent, node 1's step daemon
    [ "$(cat "$p/comm" 2>/dev/null)" = pptrain ] || continue
    env_=$(tr '\0' '\n' <"$p/environ" 2>/dev/null)
    grep -qx "SLURM_JOB_ID=$j" <<<"$env_" && grep -qx SLURM_PROCID=1 <<<"$env_" &&
      rank1=${p#/proc/} stepd1=$(awk '/^PPid:/ {print $2}' "$p/status")
  done
fi
if [ -n "$rank1" ] && [ "$(cut -c1-10 "/proc/$stepd1/comm" 2>/dev/null)" = slurmstepd ]; then
  t0=$SECONDS
  kill -KILL "${SL_PIDS[3]}" "$stepd1" "$rank1" # slurmd of node 1 (started last), its step daemon, rank 1
  while st=$(scontrol -o show job "$j" | sed -n 's/.* JobState=\([A-Z_]*\) .*/\1/p') && [ "$st" = RUNNING ] &&
    [ $((SECONDS - t0)) -lt 60 ]; do sleep 0.3; done
  EXIT=$(scontrol -o show job "$j" | sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p')
  check "node 1 lost whole (slurmd, step daemon, rank 1): job $st $EXIT after $((SECONDS - t0)) s (limit $((grace + 6)) s)" \
    test "$st" != RUNNING -a "$EXIT" = 1:0 -a $((SECONDS - t0)) -le $((grace + 6))
  check "...the batch script says it ended the step because a rank failed" \
    grep -qF "pptrain.sbatch: rank(s) failed (${SL_NODE0}: task 0: Exited with exit code 1) and srun has not ended in $grace s" "$R/lost.log"
else
  bad "rank 1 of the lost-node job or its step daemon not found: $(tail -n 3 "$R/lost.log")"
  scancel "$j"
fi

finish
