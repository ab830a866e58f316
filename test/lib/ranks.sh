# test/lib/ranks.sh — sourced by the test scripts that start ranks by hand (no launcher),
# so that they know every PID. Uses the caller's $PPTRAIN and $tmp, and appends to its
# array pids.

# A TCP port free on loopback now (the kernel's choice).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_rank RANK WORLD PORT ARGS...: pptrain ARGS as rank RANK of WORLD, in the
# background, output in $tmp/rRANK.out, its PID appended to pids.
start_rank() {
  local r=$1 P=$2 port=$3; shift 3
  RANK=$r WORLD_SIZE=$P LOCAL_RANK=$r LOCAL_WORLD_SIZE=$P MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$PPTRAIN" "$@" >"$tmp/r$r.out" 2>&1 &
  pids+=($!)
}
