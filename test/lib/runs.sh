# test/lib/runs.sh — what the launcher tests (pprun.sh, torchrun.sh) ask of a pptrain run:
# its losses as rows, waiting for them, and the PID of one of its ranks.
rows() { tail -n +2 "$1/losses.csv" 2>/dev/null | cut -d, -f1,2; } # DIR
nrows() { rows "$1" | wc -l; }                                     # DIR
wait_rows() { # DIR N SECONDS: until DIR/losses.csv has N rows (1: not in time)
  local t0=$SECONDS
  while [ "$(nrows "$1")" -lt "$2" ]; do [ $((SECONDS - t0)) -lt "$3" ] || return 1; sleep 0.1; done
}
rank_pid() { # DIR R: the PID of the pptrain with output.dir=DIR and RANK=R in its environment
  local p
  for p in /proc/[0-9]*; do
    [ "$(cat "$p/comm" 2>/dev/null)" = pptrain ] || continue
    tr '\0' '\n' <"$p/cmdline" 2>/dev/null | grep -qxF "output.dir=$1" || continue
    tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx "RANK=$2" && echo "${p#/proc/}"
  done
}
