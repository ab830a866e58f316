# cluster.sh — sourced by test/slurm.sh: install (where missing), start and stop a real
# SLURM on this machine: munged, slurmctld and two slurmd (`slurmd -N`, one port each),
# i.e. a two-node cluster on one host, with partition `one` (node 0) and `two` (both),
# and for preemption `low` and `high` (node 0; PreemptType=preempt/partition_prio: a job
# in high preempts one in low, which gets SIGTERM and GraceTime=60 s, then is requeued;
# jobs in one and two are never preempted).
# Everything lives under $SL (a temporary directory); the only change outside it is two
# lines in /etc/hosts naming the nodes, removed again by slurm_stop. slurm_stop stops
# only the daemons slurm_start started, by their PIDs, and what is left of their job
# steps, by PID (sl_step_pids).
#
# The configuration is the smallest that runs jobs as a cluster does: munge
# authentication, no accounting, ProctrackType=proctrack/linuxproc and TaskPlugin=task/none
# (no cgroups needed), batch_sched_delay=0 and EnforcePartLimits=ALL (a job that asks
# for more than a partition has is refused at submission, as on a real cluster).
# Each node claims 4 CPUs (SlurmdParameters=config_overrides, whatever the host has) so
# that two 2-rank jobs fit on one node at once.

SLURM_PKGS=(slurmctld slurmd slurm-client munge)
SL_PIDS=()      # daemons we started, in start order
SL_HOSTS_TAG="" # marks our /etc/hosts lines

# slurm_install: the Debian packages, where missing. Returns non-zero with a reason in
# SL_WHY when they cannot be had.
slurm_install() {
  local missing=() p
  for p in "${SLURM_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null || { SL_WHY="SLURM packages missing (${missing[*]}) and no apt-get"; return 1; }
  echo "slurm.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! timeout 600 apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$SL/apt.log" 2>&1; then
    timeout 300 apt-get update -qq >>"$SL/apt.log" 2>&1
    timeout 600 apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$SL/apt.log" 2>&1 ||
      { SL_WHY="cannot install ${missing[*]}: $(tail -n 1 "$SL/apt.log")"; return 1; }
  fi
}

# free_port: a TCP port on loopback that was free a moment ago.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# sl_daemon NAME CMD...: start a daemon in the foreground of a background job; its PID
# goes to SL_PIDS, its output to $SL/NAME.out.
sl_daemon() {
  local name=$1
  shift
  "$@" >"$SL/$name.out" 2>&1 &
  SL_PIDS+=($!)
}

# slurm_start: munged, slurmctld, slurmd for nodes $SL_NODE0 and $SL_NODE1; waits until
# both nodes are idle. Returns non-zero with SL_WHY when the cluster does not come up.
slurm_start() {
  local tag=pp$$ host ctld_port n i
  SL_NODE0=${tag}n0 SL_NODE1=${tag}n1
  host=$(hostname -s)
  # munge: its key in a directory only munge reads, its socket in one everyone may enter
  mkdir -p "$SL/munge-key" "$SL/munge" "$SL/state" "$SL/spool"
  chmod 755 "$SL" "$SL/munge"
  head -c 1024 /dev/urandom >"$SL/munge-key/munge.key"
  chown -R munge:munge "$SL/munge-key" "$SL/munge" || { SL_WHY="no user munge"; return 1; }
  chmod 700 "$SL/munge-key"
  chmod 400 "$SL/munge-key/munge.key"
  sl_daemon munged setpriv --reuid=munge --regid=munge --clear-groups \
    munged -F --key-file="$SL/munge-key/munge.key" --socket="$SL/munge/munge.socket" \
    --pid-file="$SL/munge/munged.pid" --log-file="$SL/munge/munged.log" --seed-file="$SL/munge/munged.seed"
  for i in $(seq 50); do [ -S "$SL/munge/munge.socket" ] && break; sleep 0.1; done
  [ -S "$SL/munge/munge.socket" ] || { SL_WHY="munged did not start: $(tail -n 2 "$SL/munged.out")"; return 1; }
  # the node names resolve to loopback addresses of their own (rank 0's host is a name)
  SL_HOSTS_TAG="# pptrain test/slurm.sh $$"
  printf '127.0.1.10 %s %s\n127.0.1.11 %s %s\n' "$SL_NODE0" "$SL_HOSTS_TAG" "$SL_NODE1" "$SL_HOSTS_TAG" >>/etc/hosts ||
    { SL_WHY="cannot add the node names to /etc/hosts"; return 1; }
  getent hosts "$SL_NODE1" >/dev/null || { SL_WHY="the node names in /etc/hosts do not resolve"; return 1; }
  ctld_port=$(free_port)
  cat >"$SL/slurm.conf" <<EOF
ClusterName=pptest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SL/munge/munge.socket
StateSaveLocation=$SL/state
SlurmdSpoolDir=$SL/spool/%n
SlurmctldPidFile=$SL/slurmctld.pid
SlurmdPidFile=$SL/slurmd-%n.pid
SlurmctldLogFile=$SL/slurmctld.log
SlurmdLogFile=$SL/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerParameters=batch_sched_delay=0
EnforcePartLimits=ALL
ReturnToService=2
KillWait=5
MinJobAge=600
InactiveLimit=0
NodeName=$SL_NODE0 NodeHostname=$host NodeAddr=127.0.1.10 Port=$(free_port) CPUs=4 RealMemory=1000 State=UNKNOWN
NodeName=$SL_NODE1 NodeHostname=$host NodeAddr=127.0.1.11 Port=$(free_port) CPUs=4 RealMemory=1000 State=UNKNOWN
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PartitionName=one Nodes=$SL_NODE0 Default=YES MaxTime=INFINITE State=UP PreemptMode=OFF
PartitionName=two Nodes=$SL_NODE0,$SL_NODE1 MaxTime=INFINITE State=UP PreemptMode=OFF
PartitionName=low Nodes=$SL_NODE0 MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=60
PartitionName=high Nodes=$SL_NODE0 MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
EOF
  export SLURM_CONF=$SL/slurm.conf
  sl_daemon slurmctld slurmctld -D -i -f "$SLURM_CONF"
  for n in "$SL_NODE0" "$SL_NODE1"; do
    mkdir -p "$SL/spool/$n"
    sl_daemon "slurmd-$n" slurmd -D -N "$n" -f "$SLURM_CONF"
  done
  for i in $(seq 100); do
    [ "$(sinfo -h -p two -t idle -o %D 2>/dev/null)" = 2 ] && return 0
    sleep 0.2
  done
  SL_WHY="the cluster did not come up in 20 s: $(sinfo 2>&1 | tail -n 2 | tr '\n' ' ') $(tail -n 2 "$SL"/slurmctld.out "$SL"/slurmd-*.out 2>/dev/null | tr '\n' ' ')"
  return 1
}

# sl_step_pids: the PIDs of what runs of our job steps. A step daemon (slurmstepd)
# daemonizes: it is no child of our slurmd, and lives on when slurmd dies (SIGTERM to
# the test's process group, `make test` stopped, ends the daemons, which share it, and
# the test, but not the steps, which have sessions of their own; scancel cannot reach
# them through a dead slurmctld). Ours are the step daemons whose environment holds our SLURM_CONF (a
# path under $SL: they inherit slurmd's environment; no other SLURM's has it); with them
# every process of their sessions (the batch script, srun, the tasks) and below them.
sl_step_pids() {
  [ -n "${SLURM_CONF:-}" ] || return 0
  local p stepd=""
  for p in /proc/[0-9]*; do
    [ "$(cut -c1-10 "$p/comm" 2>/dev/null)" = slurmstepd ] || continue
    tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qxF "SLURM_CONF=$SLURM_CONF" && stepd="$stepd ${p#/proc/}"
  done
  [ -n "$stepd" ] || return 0
  ps -e -o pid=,ppid=,sid= | awk -v stepd="$stepd" '
    BEGIN { n = split(stepd, s, " "); for (i = 1; i <= n; i++) mine[s[i]] = 1 }
    { pid[NR] = $1; ppid[NR] = $2; sid[NR] = $3 }
    END {
      for (i = 1; i <= NR; i++) if (pid[i] in mine) sess[sid[i]] = 1
      do { grew = 0
        for (i = 1; i <= NR; i++)
          if (!(pid[i] in mine) && (ppid[i] in mine || sid[i] in sess)) { mine[pid[i]] = 1; grew = 1 }
      } while (grew)
      for (p in mine) print p
    }'
}

# sl_end_steps: SIGKILL what sl_step_pids finds, again until nothing is left (a batch
# script may fork meanwhile); says what it ended.
sl_end_steps() {
  local i pids ended=0
  for i in $(seq 50); do
    pids=$(sl_step_pids)
    [ -n "$pids" ] || break
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null
    ended=$((ended + $(wc -w <<<"$pids")))
    sleep 0.1
  done
  [ $ended -eq 0 ] || echo "slurm.sh: ended $ended process(es) of job steps left running (step daemons of $SLURM_CONF and theirs)" >&2
}

# sl_wait_gone PID...: wait until none of the PIDs is alive, at most 10 s (1: some are).
sl_wait_gone() {
  local i p alive
  for i in $(seq 100); do
    alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive -eq 0 ] && return 0
    sleep 0.1
  done
  return 1
}

# slurm_stop: cancel what is left of our jobs (while slurmctld runs), stop our daemons
# (SIGTERM, SIGKILL after 10 s), end what is left of their job steps by PID
# (sl_end_steps) and remove our /etc/hosts lines.
slurm_stop() {
  local i p
  if [ -n "${SLURM_CONF:-}" ] && [ ${#SL_PIDS[@]} -gt 1 ] && kill -0 "${SL_PIDS[1]}" 2>/dev/null; then
    scancel --full $(squeue -h -o %i 2>/dev/null) 2>/dev/null
    for i in $(seq 50); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  for ((i = ${#SL_PIDS[@]} - 1; i >= 0; i--)); do kill -TERM "${SL_PIDS[i]}" 2>/dev/null; done
  sl_wait_gone "${SL_PIDS[@]}"
  for p in "${SL_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait "${SL_PIDS[@]}" 2>/dev/null
  [ ${#SL_PIDS[@]} -eq 0 ] || sl_end_steps
  SL_PIDS=()
  if [ -n "$SL_HOSTS_TAG" ]; then # rewrite in place: /etc/hosts may be a bind mount
    grep -vF -- "$SL_HOSTS_TAG" /etc/hosts >"$SL/hosts.new" && cat "$SL/hosts.new" >/etc/hosts
    SL_HOSTS_TAG=""
  fi
}
