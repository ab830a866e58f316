#!/usr/bin/env python3
"""netattack.py — the network attacks of issue 17, mounted on real 2-rank pptrain jobs on
loopback (opt-in, not part of make test, which runs the same attacks in test_auth.c):

  python3 test/netattack.py [--pptrain ./pptrain] [--proto new|old] [--only NAME]

Each attack prints one line: ok, or FAIL with what happened. --proto old speaks the
protocol of pptrain before job tokens (no handshake, hello version 1), to show what the
attacks did to it. Exit 0 when every attack was held off.
"""
import argparse
import os
import secrets
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "netattack-" + secrets.token_hex(16)
AUTH_MAGIC, RDZV_MAGIC, MESH_MAGIC, WIRE_MAGIC = 0x75617070, 0x76727070, 0x6d737070, 0x6d777070
SANITIZER = ("AddressSanitizer", "LeakSanitizer", "runtime error:")
sanitizer_reports = []  # the first line of each, from any pptrain process


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """A 2-rank gpt-tiny job started rank by rank, without pprun."""

    def __init__(self, args, tmp, token=None, timeout_s=10, steps=4):
        self.args, self.port, self.token = args, free_port(), token
        self.cmd = [args.pptrain, "--config", os.path.join(ROOT, "configs/gpt-tiny.yaml"),
                    "--set", f"train.steps={steps}", "--set", "data.val_every=0",
                    "--set", f"runtime.timeout_s={timeout_s}", "--set", "output.log_every=1",
                    "--set", f"output.dir={tmp}/run{self.port}"]
        self.procs, self.t0 = {}, time.monotonic()

    def env(self, rank, token):
        e = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=str(self.port))
        e.pop("PPTRAIN_JOB_TOKEN", None)
        if token:
            e["PPTRAIN_JOB_TOKEN"] = token
        return e

    def start(self, rank, token="job"):
        token = self.token if token == "job" else token
        p = subprocess.Popen(self.cmd, env=self.env(rank, token), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, cwd=ROOT)
        self.procs.setdefault(rank, []).append(p)
        return p

    def config_text(self):
        return subprocess.run(self.cmd + ["--print-config"], capture_output=True, text=True,
                              cwd=ROOT).stdout

    def finish(self, p, limit):
        try:
            out, err = p.communicate(timeout=limit)
            code = p.returncode
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            code = None
        err = err.decode(errors="replace")
        sanitizer_reports.extend(l for l in err.splitlines() if any(k in l for k in SANITIZER))
        return code, out.decode(errors="replace"), err


def connect(port, tries=150):
    for _ in range(tries):
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            time.sleep(0.02)
    raise OSError(f"cannot connect to port {port}")


def recv_n(s, n):
    b = b""
    while len(b) < n:
        k = s.recv(n - len(b))
        if not k:
            raise OSError("closed")
        b += k
    return b


def handshake(s, proto, purpose):
    """The dialer's side of the token-less handshake (anyone can speak it)."""
    if proto == "old":
        return True
    s.sendall(struct.pack("<IIII", AUTH_MAGIC, 1, purpose, 0) + os.urandom(32))
    magic, status = struct.unpack("<II", recv_n(s, 80)[:8])
    if magic != AUTH_MAGIC or status != 0:
        return False
    s.sendall(struct.pack("<II", AUTH_MAGIC, 0) + bytes(32))
    return struct.unpack("<II", recv_n(s, 8)) == (AUTH_MAGIC, 0)


def hello(proto, rank, world, cfg, listen_port=1234):
    if proto == "old":
        return struct.pack("<IIiiII", RDZV_MAGIC, 1, rank, world, listen_port, len(cfg)) + cfg
    # version 3: the job identity (empty: ranks launched without SLURM or torchrun), then cfg
    return struct.pack("<IIiiIII", RDZV_MAGIC, 3, rank, world, listen_port, 0, len(cfg)) + cfg


# ---------------------------------------------------------------- the attacks --

def job_survives(args, tmp, attack, token=None, rank1_delay=1.0, limit=40):
    """Start rank 0, run attack(port) in a thread, start rank 1 after rank1_delay: both
    must exit 0 within limit. Returns (ok, what happened)."""
    j = Job(args, tmp, token)
    p0 = j.start(0)
    time.sleep(0.2)
    th = threading.Thread(target=attack, args=(j,), daemon=True)
    th.start()
    time.sleep(rank1_delay)
    p1 = j.start(1)
    r1, _, e1 = j.finish(p1, limit)
    r0, _, e0 = j.finish(p0, 5 if r1 is not None else 1)
    t = time.monotonic() - j.t0
    if r0 == 0 and r1 == 0:
        return True, f"job trained and exited 0 in {t:.1f} s"
    return False, (f"rank 0 exit {r0}, rank 1 exit {r1} after {t:.1f} s: "
                   f"{(e0.strip().splitlines() or [''])[-1]} | {(e1.strip().splitlines() or [''])[-1]}")


def forged(kind):
    def attack(args, tmp):
        def go(j):
            cfg = j.config_text().encode()
            if kind == "config":
                cfg = cfg.replace(b"steps: 4", b"steps: 99")
            s = connect(j.port)
            if handshake(s, args.proto, 1):
                s.sendall(hello(args.proto, -7 if kind == "rank" else 1,
                                3 if kind == "world" else 2, cfg))
            time.sleep(5)
        return job_survives(args, tmp, go)
    return attack


def idle(n, token):
    def attack(args, tmp):
        def go(j):
            socks = [connect(j.port) for _ in range(n)]
            time.sleep(30)
            del socks
        return job_survives(args, tmp, go, TOKEN if token else None)
    return attack


def drip(token):
    def attack(args, tmp):
        def go(j):
            s = connect(j.port)
            for _ in range(20):
                try:
                    s.send(b"p")
                except OSError:  # dropped: what rank 0 should do
                    return
                time.sleep(3)
        return job_survives(args, tmp, go, TOKEN if token else None)
    return attack


def drip_alone(args, tmp):
    """Rank 1 never comes: rank 0 must give up by timeout_s = 10, blaming rank 1."""
    j = Job(args, tmp)
    p0 = j.start(0)
    time.sleep(0.2)

    def go():
        s = connect(j.port)
        for _ in range(40):
            try:
                s.send(b"p")
            except OSError:
                return
            time.sleep(3)
    threading.Thread(target=go, daemon=True).start()
    r0, _, e0 = j.finish(p0, 30)
    t = time.monotonic() - j.t0
    last = (e0.strip().splitlines() or [""])[-1]
    ok = r0 not in (None, 0) and t < 11.5 and "rank(s) 1" in last
    return ok, f"rank 0 exit {r0} after {t:.1f} s: {last}"


def scan(args, tmp):
    def go(j):
        for _ in range(100):
            try:
                connect(j.port).close()
            except OSError:
                pass
    return job_survives(args, tmp, go, TOKEN)


def garbage(args, tmp):
    def go(j):
        s = connect(j.port)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + os.urandom(4000))
        time.sleep(5)
    return job_survives(args, tmp, go, TOKEN)


def flood(args, tmp):
    def go(j):
        socks = []
        for _ in range(200):
            try:
                socks.append(connect(j.port, tries=5))
            except OSError:
                pass
        time.sleep(20)
    return job_survives(args, tmp, go, TOKEN)


def intruder(token):
    """A process without the job's token (none, or another) starts as rank 1 before the
    real rank 1: it must not join, and the job must train."""
    def attack(args, tmp):
        j = Job(args, tmp, TOKEN)
        p0 = j.start(0)
        time.sleep(0.2)
        pi = j.start(1, token)
        ri, oi, ei = j.finish(pi, 30)
        p1 = j.start(1)
        r1, _, e1 = j.finish(p1, 30)
        r0, _, e0 = j.finish(p0, 5)
        joined = ri == 0 or "step" in oi
        ok = not joined and r0 == 0 and r1 == 0
        return ok, (f"intruder exit {ri} ({(ei.strip().splitlines() or [''])[-1][:110]}); "
                    f"job exits {r0}/{r1}")
    return attack


def huge_header(args, tmp):
    """A process that joins a token-less job as rank 1 (it knows the printed config) sends
    a message header claiming 2^62 bytes: rank 0 must fail naming rank 1, not die of it."""
    j = Job(args, tmp, None)
    p0 = j.start(0)
    cfg = j.config_text().encode()
    s = connect(j.port)
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(4)
    if not handshake(s, args.proto, 1):
        return False, "handshake refused"
    s.sendall(hello(args.proto, 1, 2, cfg, lst.getsockname()[1]))
    magic, status, n, _ = struct.unpack("<IiII", recv_n(s, 16))
    recv_n(s, n)
    chans = []
    for ch in range(2):
        c = connect(j.port)
        handshake(c, args.proto, 2)
        c.sendall(struct.pack("<Iiii", MESH_MAGIC, 1, 2, ch))
        recv_n(c, 16)
        chans.append(c)
    chans[0].sendall(struct.pack("<I4iIQQ", WIRE_MAGIC, 0, 0, 0, 0, 0, 1 << 62, 0))
    r0, _, e0 = j.finish(p0, 30)
    last = (e0.strip().splitlines() or [""])[-1]
    ok = r0 == 1 and "rank 1" in last and "out of memory" not in last and "fatal" not in last
    return ok, f"rank 0 exit {r0}: {last[:200]}"


ATTACKS = [
    ("forged-hello-rank-7", forged("rank")),
    ("forged-hello-world3", forged("world")),
    ("forged-hello-config", forged("config")),
    ("idle-40", idle(40, False)),
    ("idle-40-token", idle(40, True)),
    ("drip-3s", drip(False)),
    ("drip-3s-token", drip(True)),
    ("drip-3s-alone", drip_alone),
    ("port-scan-100", scan),
    ("garbage", garbage),
    ("flood-200", flood),
    ("intruder-no-token", intruder(None)),
    ("intruder-wrong-token", intruder("wrong-" + secrets.token_hex(16))),
    ("header-2e62", huge_header),
]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pptrain", default=os.path.join(ROOT, "pptrain"))
    p.add_argument("--proto", choices=["new", "old"], default="new")
    p.add_argument("--only", default=None)
    args = p.parse_args()
    args.pptrain = os.path.abspath(args.pptrain)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="pptrain-netattack.") as tmp:
        for name, attack in ATTACKS:
            if args.only and args.only != name:
                continue
            t = time.monotonic()
            try:
                ok, what = attack(args, tmp)
            except Exception as e:  # an attack that breaks is a finding too
                ok, what = False, f"{type(e).__name__}: {e}"
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {name:22s} {time.monotonic() - t:5.1f} s  {what}",
                  flush=True)
    n = len([a for a in ATTACKS if not args.only or a[0] == args.only])
    for line in sanitizer_reports[:5]:
        print(f"FAIL sanitizer: {line}")
    print(f"netattack.py: {n - failed} of {n} attacks held off ({args.pptrain}, {args.proto} "
          f"protocol), {len(sanitizer_reports)} sanitizer reports")
    return 1 if failed or sanitizer_reports else 0


if __name__ == "__main__":
    sys.exit(main())
