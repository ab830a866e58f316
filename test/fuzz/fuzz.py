#!/usr/bin/env python3
"""fuzz.py — hostile inputs for pptrain under ASan/UBSan. Issue 17's areas, same counts:
config (2,134 config mutations), tokens (74 token files), ckpt (2,640 checkpoint
corruptions, 2,518 of them single-byte flips); and the areas of the surfaces added since,
each in a module of its own (fuzz_<area>.py, entry fuzz_<area>(runner, n, rng)): tok
(tokenizer.json files, prepare-data's inputs and options), hub (Hugging Face directories:
config.json, safetensors, sharded indexes; import, sample, export), cli (shard lists and
globs, pptrain sample / plot / flight, the subcommands' options). Opt-in, not part of
`make test` (it takes many minutes): run it through test/fuzz/fuzz.sh, which builds the
sanitizer binary first.

Every case runs the binary under a wall-clock limit and is classified:
  crash   a signal, or any AddressSanitizer / UndefinedBehaviorSanitizer report
  hang    still running at the limit (killed) and mostly idle: stuck
  slow    still running at the limit but busy computing all along (a config that asks
          for a long run, e.g. 2^31 validation batches): reported, not a hang (busy: half
          the wall time on the CPU, or a tenth and running when killed: a loaded machine)
  check   died on an internal check ("fatal: check failed") instead of a message
  wrong   a silent wrong success: a bad config or token file accepted, a config value
          read differently from what the YAML says (checked against PyYAML), or a
          corrupted checkpoint that loads and gives other losses than the intact one
  touched a refused resume changed the checkpoint directory
  lenient accepted, values right, but PyYAML refuses the text (libyaml is more lenient)
  ok      everything else: accepted and right, or refused with an "error:" message
Cases are deterministic (seeded); anything not ok is written to OUT/anomalies.txt with
its input, and the summary to OUT/summary.json.

usage: fuzz.py --pptrain BIN --out DIR [--area config,tokens,ckpt,tok,hub,cli] [--seed N]
               [--limit S] [--cases N]
"""
import argparse
import hashlib
import importlib
import json
import math
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SAN_ENV = {
    # allocations too big for the machine come back NULL, so pp_malloc reports them
    "ASAN_OPTIONS": "allocator_may_return_null=1:detect_leaks=0:abort_on_error=0",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
}

# The base config: a tiny model on one process, every key written out.
BASE = """\
model:
  arch: gpt2
  vocab_size: 256
  padded_vocab_size: 0
  max_seq_len: 32
  n_layers: 2
  n_heads: 2
  dim: 16
  tie_embeddings: true
  init_from: null
  init_std: 0.02
pipeline:
  stages: 1
  virtual_stages: 1
  schedule: 1f1b
  schedule_file: null
  microbatches: 2
  split: auto
train:
  batch_size: 4
  seq_len: 16
  steps: 2
  seed: 1337
  grad_clip: 1.0
  optimizer:
    name: adamw
    lr: 0.001
    beta1: 0.9
    beta2: 0.95
    eps: 1e-08
    weight_decay: 0.1
    momentum: 0.9
  lr_schedule:
    warmup_steps: 1
    decay: cosine
    min_lr_ratio: 0.1
data:
  train: DATA/train.bin
  val: DATA/val.bin
  val_every: 1
  val_batches: 2
output:
  dir: OUTDIR
  log_every: 1
  checkpoint_every: 0
  checkpoint_keep: 2
  compression_level: 6
  trace: false
runtime:
  device: auto
  precision: fp32
  transport: auto
  threads: 1
  timeout_s: 30
"""


class Runner:
    def __init__(self, pptrain, out, limit):
        self.pptrain, self.out, self.limit = pptrain, out, limit
        self.counts = {}
        self.sites = {}
        self.last = ""  # where the sanitizers stopped: "file:line: what" -> count
        self.anomalies = open(os.path.join(out, "anomalies.txt"), "w")
        self.log = open(os.path.join(out, "cases.txt"), "w")  # every case: outcome, message
        self.env = dict(os.environ, **SAN_ENV)

    def run(self, args, limit=None, cwd=REPO):
        """(kind, rc, output): kind is 'hang', 'crash', 'check' or None."""
        t0 = time.time()
        p = subprocess.Popen([self.pptrain] + args, cwd=cwd, env=self.env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=limit or self.limit)
        except subprocess.TimeoutExpired:
            cpu, wall = cpu_seconds(p.pid), time.time() - t0
            busy = cpu > 0.5 * wall or (cpu > 0.1 * wall and running(p.pid))
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
            self.last = "killed at the limit after %.0f s of CPU" % cpu
            return "slow" if busy else "hang", None, out.decode("utf-8", "replace")
        text = out.decode("utf-8", "replace")
        self.last = "exit %d %s" % (p.returncode, error_line(text))
        if p.returncode < 0 or p.returncode >= 128 or "Sanitizer" in text or "runtime error:" in text:
            return "crash", p.returncode, text
        if "fatal: check failed" in text:
            return "check", p.returncode, text
        return None, p.returncode, text

    def record(self, area, kind, what, detail=""):
        if kind == "crash":
            m = re.search(r"(\S+:\d+:\d+: runtime error: [^\n]{0,60})|ERROR: AddressSanitizer: \S+|"
                          r"ERROR: LeakSanitizer|fatal: [^\n]{0,60}", detail)
            site = m.group(0) if m else "signal"
            self.sites[site] = self.sites.get(site, 0) + 1
        key = (area, kind)
        self.counts[key] = self.counts.get(key, 0) + 1
        self.log.write("%s\t%s\t%s\t%s\n" % (area, kind, what[:120].replace("\n", " "), self.last[:240]))
        if kind != "ok":
            self.anomalies.write("== %s %s: %s\n%s\n" % (area, kind, what, detail[-3000:]))
            self.anomalies.flush()
            print("  %s %s: %s" % (area, kind, what[:150]), flush=True)


def cpu_seconds(pid):
    """User + system CPU seconds of a running process (all its threads)."""
    try:
        f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def running(pid, samples=5):
    """Whether the process is running or runnable (state R) in most of a few samples 10 ms
    apart: computing, though it may get little CPU on a loaded machine; a stuck one sleeps."""
    seen = 0
    for _ in range(samples):
        try:
            seen += open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0] == "R"
        except (OSError, IndexError):
            pass
        time.sleep(0.01)
    return seen > samples // 2


def error_line(text):
    m = re.search(r"error: .*", text)
    return m.group(0) if m else ""


# ---- configs -----------------------------------------------------------------------

HOSTILE = ["", "null", "~", "-1", "0", "1", "2", "7", "2147483647", "2147483648", "2147483584",
           "-2147483648", "-2147483649", "4294967298", "9223372036854775807",
           "18446744073709551616", "1e3", "1.5", "-0.0", "0x10", "010", "1_000", ".nan", ".inf",
           "-.inf", "1e39", "1e-50", "true", "no", "tRuE", '"4"', "'4'", "!!str 4", "!!int 4",
           '!!int "4"', "!!float 1.0", "!!bool true", "!!null", "!foo x", "[1, 2]", "{a: 1}",
           "&a 1", '"a\\0b"', '"\\x00"', '"\\u202e"', "/dev/zero", "FIFO", "DIR", "x" * 2000,
           "é", "- 1", "|\n    text", ">-\n    folded", "auto", "[layers.1]", '["layers.1"]',
           "[0]", "[1, 1]", "[1, 1, 1]", "sgd", "gpipe", "zbv", "interleaved-1f1b"]


def base_text(outdir):
    """BASE with its output directory and absolute data paths (runs start elsewhere)."""
    return BASE.replace("OUTDIR", outdir).replace("DATA/", os.path.join(REPO, "data/tiny/"))


def parse_base():
    """[(dotted key, line index, indent)] of every value line of BASE."""
    keys, stack = [], []
    for i, line in enumerate(BASE.splitlines()):
        ind = (len(line) - len(line.lstrip())) // 2
        name, _, val = line.strip().partition(":")
        stack = stack[:ind] + [name]
        if val.strip():
            keys.append((".".join(stack), i, ind))
    return keys


def config_cases(n, rng, fifo, tmpdir):
    lines = BASE.splitlines()
    keys = parse_base()
    cases = []

    def with_line(i, new):
        ls = list(lines)
        if new is None:
            del ls[i]
        else:
            ls[i] = new
        return ("\n".join(ls) + "\n").encode()

    sets = []
    for key, i, ind in keys:  # keys x hostile values: a seeded sample of 1,500 of them
        for v in HOSTILE:
            v = {"FIFO": fifo, "DIR": tmpdir}.get(v, v)
            sets.append(("set %s: %s" % (key, v[:40]), with_line(i, "  " * ind + key.split(".")[-1] + ": " + v), key, v))
    cases += rng.sample(sets, min(len(sets), n * 7 // 10))
    for key, i, ind in keys:  # every key deleted
        cases.append(("delete " + key, with_line(i, None), None, None))
    for key, i, ind in keys[::3]:  # duplicated, dotted, unknown, mis-indented
        name = key.split(".")[-1]
        cases.append(("duplicate " + key, with_line(i, lines[i] + "\n" + lines[i]), None, None))
        cases.append(("dotted " + key, (BASE + key + ": 1\n").encode(), None, None))
        cases.append(("unknown near " + key, with_line(i, "  " * ind + name + "x: 1"), None, None))
        cases.append(("indent " + key, with_line(i, " " + lines[i]), None, None))
        cases.append(("tab " + key, with_line(i, "\t" + lines[i].lstrip()), None, None))
    for cut in range(0, len(BASE), 97):  # truncated anywhere
        cases.append(("truncated at %d" % cut, BASE[:cut].encode(), None, None))
    for extra in ["---\nmodel: {}\n", "...\n", "--- !!map\n", "\ufeff", "%YAML 1.1\n---\n", "\x00", "\xff\xfe",
                  "*alias\n", "? complex\n: key\n", "<<: {a: 1}\n"]:
        cases.append(("extra %r" % extra, (BASE + extra).encode("utf-8", "surrogateescape"), None, None))
        cases.append(("prefix %r" % extra, (extra + BASE).encode("utf-8", "surrogateescape"), None, None))
    while len(cases) < n:  # random byte flips of the text
        b = bytearray(BASE.encode())
        for _ in range(rng.choice([1, 1, 2, 3])):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        cases.append(("byte flip %d" % len(cases), bytes(b), None, None))
    rng.shuffle(cases)
    return cases[:n]


def flatten(d, prefix=""):
    out = {}
    if isinstance(d, dict):
        for k, v in d.items():
            key = prefix + str(k)
            if isinstance(v, dict):
                out.update(flatten(v, key + "."))
            else:
                out[key] = v
    return out


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def same_value(key, want, got, kinds):
    """Whether pptrain's printed value `got` is what the YAML value `want` means."""
    kind = kinds[key]
    if key == "model.padded_vocab_size" and want == 0:
        return True  # resolved by finalize
    if key == "pipeline.split":
        if want == "auto":
            return got == "auto"
        if isinstance(want, list):
            return got == want or (isinstance(got, list) and [str(x) for x in got] == [str(x) for x in want])
        return False
    if key in ("data.train", "data.val") and isinstance(want, list):  # a list of paths
        got = [got] if isinstance(got, str) else got  # one path is printed as itself
        return isinstance(got, list) and [str(x) for x in want] == [str(x) for x in got]
    if key == "model.tie_embeddings" and want == "auto":  # by model.arch, printed resolved
        return isinstance(got, bool)
    if kind is bool:
        return isinstance(want, bool) and want == got
    if kind is int:
        return type(want) is int and want == got
    if kind is float:
        if isinstance(want, bool) or want is None:
            return False
        if isinstance(want, str):  # YAML 1.1 reads 1e3 as a string; 1.2 as a number
            try:
                want = float(want)
            except ValueError:
                return False
        return isinstance(want, (int, float)) and math.isfinite(want) and f32(float(want)) == f32(float(got))
    # strings and paths ("" for a path-or-null key means none, as null does)
    if want is None or (want == "" and got is None):
        return got is None
    if isinstance(want, (bool, int, float)):  # a plain scalar's text, e.g. data.train: 4
        return isinstance(got, str) or got == want
    return isinstance(want, str) and want == got


def fuzz_config(r, n, rng):
    tmp = tempfile.mkdtemp(prefix="fuzzcfg.", dir=r.out)
    fifo = os.path.join(tmp, "fifo")
    os.mkfifo(fifo)
    kinds = {k: type(v) for k, v in flatten(yaml.safe_load(base_text("x"))).items()}
    kinds["train.optimizer.eps"] = float
    ran = skipped = 0
    for idx, (what, text, key, val) in enumerate(config_cases(n, rng, fifo, tmp)):
        outdir = os.path.join(tmp, "run")
        text = text.replace(b"OUTDIR", outdir.encode()).replace(b"DATA/", os.path.join(REPO, "data/tiny/").encode())
        path = os.path.join(tmp, "c.yaml")
        with open(path, "wb") as f:
            f.write(text)
        show = text.decode("utf-8", "backslashreplace")
        kind, rc, out = r.run(["--config", path, "--print-config"], limit=20, cwd=tmp)
        if kind:
            r.record("config", kind, what, show + "\n--\n" + out)
            continue
        if rc != 0:
            ok = rc == 2 and error_line(out)
            r.record("config", "ok" if ok else "wrong", what, "refused without a clear message (rc %s)\n%s" % (rc, out))
            continue
        # accepted: every value must be what the YAML says (PyYAML, the reference)
        try:
            want = flatten(yaml.safe_load(text))
        except Exception as e:
            r.record("config", "lenient", what, "accepted, but not YAML to PyYAML: %s\n%s" % (e, show))
            continue
        got = flatten(yaml.safe_load(out))
        bad = [k for k, v in want.items() if k in kinds and not same_value(k, v, got.get(k), kinds)]
        unknown = [k for k in want if k not in kinds and not isinstance(want[k], type(None))]
        if bad or unknown:
            r.record("config", "wrong", what, "accepted, read differently: %s\n%s" % (
                "; ".join("%s: yaml %r, pptrain %r" % (k, want[k], got.get(k)) for k in bad) or
                "unknown keys %s" % unknown, show))
            continue
        # and it runs (2 steps), unless it needs more memory than a fuzz box should give
        if needs_gb(got) > 1.0:
            skipped += 1
            r.record("config", "ok", what)
            continue
        shutil.rmtree(outdir, ignore_errors=True)
        ran += 1
        kind, rc, out = r.run(["--config", path, "--set", "train.steps=2"], limit=60, cwd=tmp)
        if kind:
            r.record("config", kind, what + " (training)", show + "\n--\n" + out)
        elif rc != 0 and not error_line(out):
            r.record("config", "wrong", what + " (training)", "exit %s without a message\n%s" % (rc, out))
        else:
            r.record("config", "ok", what)
    shutil.rmtree(tmp, ignore_errors=True)
    return {"trained": ran, "accepted_too_big_to_train": skipped}


def needs_gb(c):
    """A rough upper bound of the memory a run of printed config c takes, in GB."""
    try:
        V, C, L, T = c["model.padded_vocab_size"], c["model.dim"], c["model.n_layers"], c["train.seq_len"]
        maxT, B, M = c["model.max_seq_len"], c["train.batch_size"], c["pipeline.microbatches"]
        NH = c["model.n_heads"]
        params = V * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
        mb = max(B // max(M, 1), 1)
        acts = M * mb * T * (L * (20 * C + NH * T) + V)
        return (16 * params + 4 * acts + 4 * B * T * V) / 1e9
    except Exception:
        return 1e9


# ---- token files ---------------------------------------------------------------------

def token_file(path, magic=20240520, version=1, count=None, tokens=(), extra=b"", header_bytes=None):
    tokens = list(tokens)
    h = struct.pack("<3i", magic, version, len(tokens) if count is None else count) + b"\0" * (1024 - 12)
    if header_bytes is not None:
        h = h[:header_bytes]
    with open(path, "wb") as f:
        f.write(h + struct.pack("<%dH" % len(tokens), *tokens) + extra)


def token_cases(rng, d):
    good = [rng.randrange(256) for _ in range(3000)]
    cases = []  # (label, path maker, valid)

    def add(label, valid, **kw):
        cases.append((label, lambda p, kw=kw: token_file(p, **kw), valid))

    add("valid 3000 tokens", True, tokens=good)
    add("valid exactly one batch + 1 (65)", True, tokens=good[:65])
    add("valid 66", True, tokens=good[:66])
    add("valid all 255", True, tokens=[255] * 500)
    add("valid all 0", True, tokens=[0] * 500)
    add("one batch short (64)", False, tokens=good[:64])
    add("no tokens", False, tokens=[])
    add("one token", False, tokens=good[:1])
    for m in [0, 20240519, 20240521, -1, 0x7FFFFFFF, 20240326]:
        add("magic %d" % m, False, magic=m, tokens=good)
    for v in [0, 2, 3, -1, 65537]:
        add("version %d" % v, False, version=v, tokens=good)
    for c in [-1, -2147483648, 0, 1, 2999, 3001, 2147483647, 1 << 30, 64, 65]:
        add("count %d of 3000" % c, False, count=c, tokens=good)
    for e in [b"\0", b"\0\0", b"\0" * 3, b"\xff" * 100]:
        add("%d trailing bytes" % len(e), False, tokens=good, extra=e)
    for hb in [0, 1, 4, 12, 512, 1023]:
        add("header cut to %d bytes" % hb, False, header_bytes=hb, tokens=[])
    for pos in [0, 1, 64, 1500, 2999]:
        t = list(good)
        t[pos] = 256
        add("token 256 at %d" % pos, False, tokens=t)
    for v in [257, 1000, 32768, 65535]:
        t = list(good)
        t[rng.randrange(3000)] = v
        add("token %d" % v, False, tokens=t)
    add("all 65535", False, tokens=[65535] * 500)
    for k in range(5):
        n = rng.choice([1024, 1026, 1154, 3000, 7000])
        data = bytes(rng.randrange(256) for _ in range(n))
        cases.append(("random %d bytes" % n, lambda p, data=data: open(p, "wb").write(data), False))
    cases.append(("empty file", lambda p: open(p, "wb").close(), False))
    cases.append(("FIFO", lambda p: os.mkfifo(p), False))
    cases.append(("directory", lambda p: os.mkdir(p), False))
    cases.append(("dangling symlink", lambda p: os.symlink(os.path.join(d, "nowhere"), p), False))
    cases.append(("/dev/zero", lambda p: os.symlink("/dev/zero", p), False))
    cases.append(("/dev/null", lambda p: os.symlink("/dev/null", p), False))
    cases.append(("symlink to a valid file", lambda p: (token_file(p + ".real", tokens=good), os.symlink(p + ".real", p)), True))
    cases.append(("symlink loop", lambda p: os.symlink(p, p), False))
    return cases


def fuzz_tokens(r, n, rng):
    tmp = tempfile.mkdtemp(prefix="fuzztok.", dir=r.out)
    base = os.path.join(tmp, "base.yaml")
    open(base, "w").write(base_text(os.path.join(tmp, "run")))
    cases = token_cases(rng, tmp)
    # as data.train, and the same files again as data.val (valid train file) until n
    plan = [(c, "data.train") for c in cases] + [(c, "data.val") for c in cases[::5]]
    plan = plan[:n]
    for k, ((label, make, valid), key) in enumerate(plan):
        p = os.path.join(tmp, "t%d.bin" % k)
        make(p)
        shutil.rmtree(os.path.join(tmp, "run"), ignore_errors=True)
        kind, rc, out = r.run(["--config", base, "--set", "%s=%s" % (key, p)], limit=60, cwd=tmp)
        what = "%s as %s" % (label, key)
        if kind:
            r.record("tokens", kind, what, out)
        elif valid and rc != 0:
            r.record("tokens", "wrong", what, "a valid file was refused\n" + out)
        elif not valid and rc == 0:
            r.record("tokens", "wrong", what, "a bad file was accepted\n" + out)
        elif not valid and not (rc == 2 and p in error_line(out)):
            r.record("tokens", "wrong", what, "refused without naming the file (rc %s)\n%s" % (rc, out))
        else:
            r.record("tokens", "ok", what)
    shutil.rmtree(tmp, ignore_errors=True)
    return {"files": len(plan)}


# ---- checkpoints ---------------------------------------------------------------------

def tree_sum(d):
    h = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(d)):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(root, f)
            h.update(p[len(d):].encode())
            if os.path.islink(p):
                h.update(os.readlink(p).encode())
            elif os.path.isfile(p):
                h.update(open(p, "rb").read())
    for root, dirs, files in os.walk(d):
        for x in dirs + files:
            p = os.path.join(root, x)
            if os.path.islink(p):
                h.update((p[len(d):] + "->" + os.readlink(p)).encode())
    return h.hexdigest()


def manifest_set(stepdir, pairs):
    path = os.path.join(stepdir, "manifest")
    lines = open(path).read().split("\n")[:-2]
    for k, v in pairs:
        hit = [i for i, l in enumerate(lines) if l.startswith(k + " = ")]
        if v is None:
            lines = [l for i, l in enumerate(lines) if i not in hit]
        elif hit:
            lines[hit[0]] = "%s = %s" % (k, v)
        else:
            lines.append("%s = %s" % (k, v))
    body = "".join(l + "\n" for l in lines)
    open(path, "w").write(body + "crc32 = %08x\n" % (zlib.crc32(body.encode()) & 0xFFFFFFFF))


def manifest_sums(stepdir):
    pairs = []
    for r in range(2):
        name = "shard_%05d.ckpt" % r
        data = open(os.path.join(stepdir, name), "rb").read()
        pairs += [("shard.%d.bytes" % r, str(len(data))), ("shard.%d.crc32" % r, "%08x" % (zlib.crc32(data) & 0xFFFFFFFF))]
    manifest_set(stepdir, pairs)


def structure_offsets(path):
    """Header, metadata table, index and trailer byte offsets of a shard."""
    b = open(path, "rb").read()
    mbytes = struct.unpack_from("<Q", b, 24)[0]
    ioff = struct.unpack_from("<Q", b, len(b) - 32)[0]
    return list(range(0, 64 + mbytes)) + list(range(ioff, len(b)))


def other_corruptions(stepdir, other_step, other_model):
    """(label, function(S)) for the corruptions that are not a single flipped byte; each
    function damages the copy S of the checkpoint directory `stepdir`."""
    sh = ["shard_%05d.ckpt" % r for r in range(2)]
    J = os.path.join
    latest = lambda S: J(os.path.dirname(S), "latest")

    def replace(S, name, make):  # remove S/name, then make(path)
        os.remove(J(S, name))
        make(J(S, name))

    def relink(S, target):
        os.remove(latest(S))
        os.symlink(target, latest(S))

    def swap(S, fix):
        os.rename(J(S, sh[0]), J(S, "x"))
        os.rename(J(S, sh[1]), J(S, sh[0]))
        os.rename(J(S, "x"), J(S, sh[1]))
        if fix:
            manifest_sums(S)

    def copy_in(S, src, name):
        shutil.copy(J(src, name), J(S, name))
        manifest_sums(S)

    c = []
    for r, name in enumerate(sh):
        size = os.path.getsize(J(stepdir, name))
        for frac in [0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999]:
            n = int(size * frac)
            c.append(("shard %d truncated to %d bytes" % (r, n), lambda S, name=name, n=n: os.truncate(J(S, name), n)))
        for n in [1, 31, 32, 33]:
            c.append(("shard %d minus its last %d bytes" % (r, n),
                      lambda S, name=name, n=n, size=size: os.truncate(J(S, name), size - n)))
        c.append(("shard %d with a byte appended" % r, lambda S, name=name: open(J(S, name), "ab").write(b"\0")))
        c.append(("shard %d zeroed" % r, lambda S, name=name, size=size: open(J(S, name), "wb").write(b"\0" * size)))
        c.append(("shard %d removed" % r, lambda S, name=name: os.remove(J(S, name))))
        c.append(("shard %d a FIFO" % r, lambda S, name=name: replace(S, name, os.mkfifo)))
        c.append(("shard %d a directory" % r, lambda S, name=name: replace(S, name, os.mkdir)))
        c.append(("shard %d -> /dev/zero" % r, lambda S, name=name: replace(S, name, lambda p: os.symlink("/dev/zero", p))))
        c.append(("shard %d from step 2, sums fixed" % r, lambda S, name=name: copy_in(S, other_step, name)))
        c.append(("shard %d of another model, sums fixed" % r, lambda S, name=name: copy_in(S, other_model, name)))
    c.append(("shards swapped", lambda S: swap(S, False)))
    c.append(("shards swapped, sums fixed", lambda S: swap(S, True)))
    c.append(("manifest removed", lambda S: os.remove(J(S, "manifest"))))
    c.append(("manifest empty", lambda S: open(J(S, "manifest"), "w").close()))
    c.append(("manifest a FIFO", lambda S: replace(S, "manifest", os.mkfifo)))
    c.append(("manifest a directory", lambda S: replace(S, "manifest", os.mkdir)))
    c.append(("manifest -> /dev/zero", lambda S: replace(S, "manifest", lambda p: os.symlink("/dev/zero", p))))
    c.append(("manifest without its crc line",
              lambda S: open(J(S, "manifest"), "w").write("".join(open(J(S, "manifest")).readlines()[:-1]))))
    c.append(("latest removed", lambda S: os.remove(latest(S))))
    c.append(("latest dangling", lambda S: relink(S, "step_0000099")))
    c.append(("latest a loop", lambda S: relink(S, "latest")))
    c.append(("latest a file", lambda S: (os.remove(latest(S)), open(latest(S), "w").close())))
    c.append(("latest -> ..", lambda S: relink(S, "..")))
    c.append(("latest -> a staging dir", lambda S: (os.rename(S, S + ".tmp"), relink(S, os.path.basename(S) + ".tmp"))))
    # forged manifests (CRC recomputed)
    for k, v in [("step", "0"), ("step", "2147483647"), ("step", "2147483648"), ("step", "4294967298"),
                 ("step", "9223372036854775807"), ("step", "9223372036854775808"), ("step", "-1"), ("step", "3"),
                 ("step", "1e3"), ("step", ""), ("world_size", "1"), ("world_size", "3"), ("world_size", "0"),
                 ("world_size", "1048577"), ("shards", "3"), ("shards", "1"), ("shards", "0"), ("version", "2"),
                 ("format", "other"), ("step", None), ("world_size", None), ("format", None), ("version", None),
                 ("shard.0.file", "../../../etc/passwd"), ("shard.0.file", "shard_00001.ckpt"), ("shard.0.file", "manifest"),
                 ("shard.1.bytes", "0"), ("shard.1.bytes", "99999999999999999999"), ("shard.1.crc32", "0"),
                 ("shard.99999999999.file", "x"), ("shard.-1.file", "x"), ("extra.model", "V=256"),
                 ("extra.model_hash", "1"), ("extra.model_hash", "x"), ("extra.optimizer", "sgd"), ("extra.model", None),
                 ("extra.model", "V=256 Vp=256 maxT=32 L=1 NH=2 C=16 tied=1"),
                 ("extra.model", "V=256 Vp=256 maxT=32 L=2 NH=0 C=16 tied=1")]:
        c.append(("manifest %s = %s (crc fixed)" % (k, v), lambda S, k=k, v=v: manifest_set(S, [(k, v)])))
    return c


def overwrite(stepdir, name, off, data):
    with open(os.path.join(stepdir, name), "r+b") as f:
        f.seek(off)
        f.write(data)


def fuzz_ckpt(r, nflips, nother, rng):
    tmp = tempfile.mkdtemp(prefix="fuzzckpt.", dir=r.out)
    cfg = os.path.join(tmp, "base.yaml")
    open(cfg, "w").write(base_text(os.path.join(tmp, "x")).replace("val_every: 1", "val_every: 0"))
    env = dict(r.env)

    def make(name, *sets):  # a 2-rank run of 4 steps, checkpoints at 2 and 4
        d = os.path.join(tmp, name)
        cmd = [os.path.join(REPO, "scripts/pprun"), "--nproc-per-node", "2", r.pptrain, "--config", cfg,
               "--set", "pipeline.stages=2", "--set", "output.dir=" + d, "--set", "train.steps=4",
               "--set", "output.checkpoint_every=2", "--set", "output.checkpoint_keep=5"] + list(sets)
        subprocess.run(cmd, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
        return d
    good, other = make("good"), make("other", "--set", "model.init_std=0.03")
    step4 = os.path.join(good, "checkpoints", "step_0000004")
    resume = ["--config", cfg, "--set", "train.steps=6", "--resume"]

    def attempt(what, damage):
        x = os.path.join(tmp, "x")
        shutil.rmtree(x, ignore_errors=True)
        shutil.copytree(good, x, symlinks=True)
        if os.path.exists(os.path.join(x, "losses.csv")):
            os.remove(os.path.join(x, "losses.csv"))
        damage(os.path.join(x, "checkpoints", "step_0000004"))
        before = tree_sum(os.path.join(x, "checkpoints"))
        kind, rc, out = r.run(resume, limit=60)
        if kind:
            r.record("ckpt", kind, what, out)
            return
        if rc == 0:  # it loaded: the losses must be the intact checkpoint's, bit for bit
            got = open(os.path.join(x, "losses.csv")).read().splitlines()[1:]
            got = [l.split(",")[:2] for l in got]
            r.record("ckpt", "ok" if got == clean else "wrong", what,
                     "loaded, losses %s, intact %s\n%s" % (got, clean, out))
            return
        after = tree_sum(os.path.join(x, "checkpoints"))
        if after != before:
            r.record("ckpt", "touched", what, out)
        elif not error_line(out):
            r.record("ckpt", "wrong", what, "refused without a message (rc %s)\n%s" % (rc, out))
        else:
            r.record("ckpt", "ok", what)

    # the intact checkpoint's losses for steps 5 and 6
    x = os.path.join(tmp, "x")
    shutil.copytree(good, x, symlinks=True)
    os.remove(os.path.join(x, "losses.csv"))
    kind, rc, out = r.run(resume, limit=60)
    assert kind is None and rc == 0, out
    clean = [l.split(",")[:2] for l in open(os.path.join(x, "losses.csv")).read().splitlines()[1:]]
    assert len(clean) == 2, clean

    # single-byte flips: every structural byte (headers, metadata, indexes, trailers, the
    # manifest) first, then bytes of the compressed data, all XORed with a random mask
    targets = []
    for rank in range(2):
        p = "shard_%05d.ckpt" % rank
        size = os.path.getsize(os.path.join(step4, p))
        s = structure_offsets(os.path.join(step4, p))
        targets += [(p, o) for o in s]
        targets += [(p, rng.randrange(size)) for _ in range(len(s))]
    msize = os.path.getsize(os.path.join(step4, "manifest"))
    targets += [("manifest", o) for o in range(msize)]
    rng.shuffle(targets)
    targets = targets[:nflips]
    assert len(targets) == nflips, "the checkpoint is too small for %d flips" % nflips

    def flip(S, p, o, mask):
        with open(os.path.join(S, p), "rb") as f:
            f.seek(o)
            b = f.read(1)[0]
        overwrite(S, p, o, bytes([b ^ mask]))
    for p, o in targets:
        mask = rng.randrange(1, 256)
        attempt("flip %s byte %d ^ 0x%02x" % (p, o, mask), lambda S, p=p, o=o, mask=mask: flip(S, p, o, mask))
    others = other_corruptions(step4, os.path.join(good, "checkpoints", "step_0000002"),
                               os.path.join(other, "checkpoints", "step_0000004"))
    while len(others) < nother:  # fill with multi-byte damage: runs of random bytes
        p = rng.choice(["shard_00000.ckpt", "shard_00001.ckpt"])
        o, n = rng.randrange(os.path.getsize(os.path.join(step4, p)) - 64), rng.randrange(2, 64)
        junk = bytes(rng.randrange(256) for _ in range(n))
        others.append(("%d random bytes at %s+%d" % (n, p, o), lambda S, p=p, o=o, junk=junk: overwrite(S, p, o, junk)))
    for what, damage in others[:nother]:
        attempt(what, damage)
    # export of forged model entries: refused before anything is allocated
    for m in ["V=256 Vp=256 maxT=32 L=1 NH=2 C=16 tied=1", "V=0 Vp=256 maxT=32 L=2 NH=2 C=16 tied=1",
              "V=256 Vp=256 maxT=32 L=200000000 NH=2 C=16 tied=1", "V=256 Vp=256 maxT=32 L=2 NH=2 C=1000000000 tied=1"]:
        shutil.rmtree(x, ignore_errors=True)
        shutil.copytree(good, x, symlinks=True)
        manifest_set(os.path.join(x, "checkpoints", "step_0000004"), [("extra.model", m)])
        kind, rc, out = r.run(["export", "--checkpoint", os.path.join(x, "checkpoints"), "--out", os.path.join(x, "m.bin")], limit=60)
        what = "export with model %s" % m
        r.record("ckpt-export", kind or ("ok" if rc != 0 and error_line(out) else "wrong"), what, out)
    shutil.rmtree(tmp, ignore_errors=True)
    return {"flips": len(targets), "other": min(len(others), nother)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pptrain", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--area", default="config,tokens,ckpt,tok,hub,cli")
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--limit", type=float, default=60)
    ap.add_argument("--configs", type=int, default=2134)
    ap.add_argument("--tokens", type=int, default=74)
    ap.add_argument("--flips", type=int, default=2518)
    ap.add_argument("--other", type=int, default=122)
    ap.add_argument("--cases", type=int, default=100000,
                    help="at most this many cases in each area of its own module (tok, hub, cli)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    r = Runner(os.path.abspath(a.pptrain), os.path.abspath(a.out), a.limit)
    extra, t0 = {}, time.time()
    for area in a.area.split(","):
        rng = random.Random("%s-%d" % (area, a.seed))
        t = time.time()
        print("fuzz: %s ..." % area, flush=True)
        if area == "config":
            extra[area] = fuzz_config(r, a.configs, rng)
        elif area == "tokens":
            extra[area] = fuzz_tokens(r, a.tokens, rng)
        elif area == "ckpt":
            extra[area] = fuzz_ckpt(r, a.flips, a.other, rng)
        elif os.path.exists(os.path.join(HERE, "fuzz_%s.py" % area)):  # an area of its own module
            mod = importlib.import_module("fuzz_" + area)
            extra[area] = getattr(mod, "fuzz_" + area)(r, a.cases, rng)
        else:
            sys.exit("unknown area " + area)
        extra[area]["seconds"] = round(time.time() - t)
    table = {}
    for (area, kind), n in sorted(r.counts.items()):
        table.setdefault(area, {})[kind] = n
    summary = {"counts": table, "details": extra, "crash_sites": r.sites, "seconds": round(time.time() - t0),
               "seed": a.seed}
    json.dump(summary, open(os.path.join(a.out, "summary.json"), "w"), indent=1)
    print(json.dumps(summary, indent=1))
    bad = sum(n for (area, kind), n in r.counts.items() if kind not in ("ok", "lenient", "slow"))
    print("fuzz: %d cases, %d not ok (see %s/anomalies.txt)" % (sum(r.counts.values()), bad, a.out))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
