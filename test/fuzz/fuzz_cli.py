"""fuzz_cli.py — hostile input for pptrain's newer command-line and data surfaces (the
`cli` area of test/fuzz/fuzz.py, `--area cli`): sharded token streams (data.train /
data.val as a glob or a list, shards validated when first reached or changed under the
run, 10,000 shards under 64 descriptors, resumes with other lists or hand-edited stream
records), `pptrain sample` (every option's edge values, damaged checkpoints, configs),
`pptrain plot` (malformed, extreme and huge losses.csv, many runs, --out), `pptrain
flight` (garbage, FIFOs, devices, huge worlds, cycles, long chains) and the subcommands'
options (main.c's and the other subcommands'). Each case knows whether its input is
valid: a valid one must succeed and be right where that can be checked (a temperature
that underflows samples as greedy does, a plot has no NaN, a cycle is named, a later bad
shard ends the run at the step before it with that step's checkpoint); a bad one must
exit non-zero with an "error:" line naming the file or option. Kinds as fuzz.py's.

fuzz_cli(r, n, rng): at most n cases (the five parts share n: shards 20%, sample 35%,
plot 25%, flight 12%, args 8%; n = 700 runs every case, about 640), seeded by rng, all
files under a tempdir in r.out, every pptrain through r.run (a thread may change a shard
while a run reads it). About a minute on the sanitizer build once nothing hangs."""
import os
import random
import re
import resource
import shutil
import struct
import tempfile
import threading
import time

import fuzz
from fuzz import REPO, token_file

TOK32 = dict(magic=20240801, version=7)


def run_cases(cases, n, rng, d):
    """Run a part's (what, go) cases, a seeded sample of n of them where there are more,
    then remove the part's directory d."""
    picked = cases if len(cases) <= n else rng.sample(cases, n)
    for what, go in picked:
        go()
    shutil.rmtree(d, ignore_errors=True)
    return {"cases": len(picked)}


def errors(out):
    """Every "error:" line of out, joined."""
    return "\n".join(re.findall(r"error: .*", out))


def judge(r, area, what, kind, rc, out, valid, names=(), check=None):
    """Record one case. valid True: rc 0 (and check(out) None, else its text: wrong);
    False: rc != 0 with an error line that names every string of names; None: either."""
    if kind:
        return r.record(area, kind, what, out)
    if rc == 0:
        if valid is False:
            return r.record(area, "wrong", what, "a bad input was accepted\n" + out)
        why = check(out) if check else None
        return r.record(area, "wrong" if why else "ok", what, (why or "") + "\n" + out)
    if valid is True:
        return r.record(area, "wrong", what, "a valid input was refused (rc %s)\n%s" % (rc, out))
    e = errors(out)
    missing = [s for s in names if s not in e]
    if not e or missing:
        return r.record(area, "wrong", what, "refused (rc %s) without an error line naming %s\n%s"
                        % (rc, missing or "anything", out))
    r.record(area, "ok", what)


def tiny_tokens():
    """data/tiny/train.bin's uint16 tokens."""
    b = open(os.path.join(REPO, "data/tiny/train.bin"), "rb").read()
    n = struct.unpack_from("<i", b, 8)[0]
    return list(struct.unpack_from("<%dH" % n, b, 1024))


def token_file32(path, tokens):
    h = struct.pack("<3i", TOK32["magic"], TOK32["version"], len(tokens)) + b"\0" * 1012
    open(path, "wb").write(h + struct.pack("<%dI" % len(tokens), *tokens))


def base_config(tmp, name="base.yaml", extra=""):
    p = os.path.join(tmp, name)
    text = fuzz.base_text(os.path.join(tmp, "run")).replace("val_every: 1", "val_every: 0")
    text = text.replace("  val: " + os.path.join(REPO, "data/tiny/val.bin"), "  val: null")
    open(p, "w").write(text + extra)
    return p


def last_step(d):
    try:
        rows = open(os.path.join(d, "losses.csv")).read().split("\n")[1:]
        rows = [x for x in rows if x]
        return int(rows[-1].split(",")[0]) if rows else 0
    except OSError:
        return 0


def latest_step(d):
    try:
        return int(os.path.basename(os.readlink(os.path.join(d, "checkpoints", "latest")))[5:])
    except (OSError, ValueError):
        return -1


# ---- shards ----------------------------------------------------------------------------

def fuzz_shards(r, n, rng, tmp):
    A = "cli-shards"
    d = os.path.join(tmp, "shards")
    os.makedirs(d)
    toks = tiny_tokens()
    cfg = base_config(d)
    run_dir = os.path.join(d, "run")
    J = lambda *p: os.path.join(d, *p)
    seq = [0]

    def shard(ntok, off=0, bad_at=None, bad=256, w=2, **kw):
        """A new shard of ntok tokens of data/tiny from off (token bad_at set to bad)."""
        seq[0] += 1
        p = J("s%04d.bin" % seq[0])
        t = [toks[(off + i) % len(toks)] for i in range(ntok)]
        if bad_at is not None:
            t[bad_at] = bad
        if w == 4:
            token_file32(p, t)
        else:
            token_file(p, tokens=t, **kw)
        return p

    def train(spec, steps, extra=(), limit=60, during=None, cfg_path=None):
        shutil.rmtree(run_dir, ignore_errors=True)
        args = ["--config", cfg_path or cfg, "--set", "train.steps=%d" % steps] + list(extra)
        if spec is not None:
            args += ["--set", "data.train=" + spec]
        if during:
            stop = threading.Event()
            th = threading.Thread(target=during, args=(stop,))
            th.start()
            try:
                return r.run(args, limit=limit, cwd=d)
            finally:
                stop.set()
                th.join()
        return r.run(args, limit=limit, cwd=d)

    def lst(*paths):
        return "[" + ", ".join(paths) + "]"

    cases = []  # (what, function() -> None): each records itself

    def start_case(what, spec, valid, names=(), steps=3, extra=()):
        def go():
            kind, rc, out = train(spec() if callable(spec) else spec, steps, extra)
            if valid is False and not kind and rc not in (0, 2):
                return r.record(A, "wrong", what, "refused at the start with exit %s, not 2\n%s" % (rc, out))
            judge(r, A, what, kind, rc, out, valid, names() if callable(names) else names)
        cases.append((what, go))

    def later_case(what, make, steps, good, name_of):
        """A stream whose shard (path name_of(spec)) fails when reached after `good` steps:
        exit 1 naming it, steps 1..good done, a checkpoint of step good."""
        def go():
            spec = make()
            kind, rc, out = train(spec, steps)
            if kind:
                return r.record(A, kind, what, out)
            e, name = errors(out), name_of(spec)
            if rc != 1 or name not in e:
                return r.record(A, "wrong", what, "want exit 1 naming %s, got %s\n%s" % (name, rc, out))
            if last_step(run_dir) != good or (good > 0 and latest_step(run_dir) != good):
                return r.record(A, "wrong", what, "want steps 1..%d and a checkpoint of step %d: "
                                "losses.csv ends at %d, latest is %d\n%s" % (
                                    good, good, last_step(run_dir), latest_step(run_dir), out))
            r.record(A, "ok", what)
        cases.append((what, go))

    # the start: globs and lists that match nothing or no token file
    os.mkdir(J("adir"))
    os.mkfifo(J("fifo.bin"))
    os.symlink("/dev/zero", J("zero.bin"))
    os.symlink(J("nowhere.bin"), J("dangling.bin"))
    os.symlink(J("loop.bin"), J("loop.bin"))
    good = shard(1000)
    start_case("a glob matching nothing", J("none_*.bin"), False, [J("none_*.bin")])
    start_case("a glob in a missing directory", J("nodir", "*.bin"), False, [J("nodir", "*.bin")])
    start_case("an empty list", "[]", False, ["data.train"])
    start_case("a list of an empty string", '[""]', False, ["data.train"])
    for label, p in [("a directory", J("adir")), ("a FIFO", J("fifo.bin")), ("/dev/zero", J("zero.bin")),
                     ("a dangling symlink", J("dangling.bin")), ("a symlink loop", J("loop.bin"))]:
        start_case("a list: good, then %s" % label, lst(good, p), False, [p])
        start_case("a list: %s, then good" % label, lst(p, good), False, [p])
    os.mkdir(J("g1"))
    os.mkdir(J("g1", "x_b.bin"))
    shutil.copy(good, J("g1", "x_a.bin"))
    start_case("a glob matching a file and a directory", J("g1", "x_*.bin"), False, [J("g1", "x_b.bin")])
    os.mkdir(J("g2"))
    shutil.copy(good, J("g2", "x_a.bin"))
    os.mkfifo(J("g2", "x_b.bin"))
    start_case("a glob matching a file and a FIFO", J("g2", "x_*.bin"), False, [J("g2", "x_b.bin")])
    os.mkdir(J("g3"))
    shutil.copy(good, J("g3", "x_a.bin"))
    os.symlink("/dev/zero", J("g3", "x_b.bin"))
    start_case("a glob matching a file and /dev/zero", J("g3", "x_*.bin"), False, [J("g3", "x_b.bin")])
    os.mkdir(J("g4"))
    shutil.copy(good, J("g4", "x_a.bin"))
    os.symlink(J("nowhere"), J("g4", "x_b.bin"))
    start_case("a glob matching a file and a dangling symlink", J("g4", "x_*.bin"), False, [J("g4", "x_b.bin")])
    os.mkdir(J("g5"))
    os.mkdir(J("g5", "sub_1.bin"))
    start_case("a glob matching only a directory", J("g5", "sub_*.bin"), False, [J("g5", "sub_1.bin")])
    os.makedirs(J("g6", "locked"))
    start_case("a glob through an unreadable path", J("g6", "locked", "*", "*.bin"), False,
               [J("g6", "locked", "*", "*.bin")])
    # mixed widths, versions, headers
    w32 = shard(1000, w=4)
    start_case("uint16 then uint32 shards", lst(good, w32), False, [w32])
    start_case("uint32 then uint16 shards", lst(w32, good), False, [good])
    start_case("uint32 shards alone (ids < 256)", lst(w32, w32), True)
    for v in [0, 2, 7, -1]:
        p = shard(1000, version=v)
        start_case("a later shard of version %d" % v, lambda p=p: lst(good, good, p), False, [p])
    for m in [20240801, 20240326, 0]:
        p = shard(1000, magic=m)
        start_case("a later shard of magic %d" % m, lambda p=p: lst(good, p), False, [p])
    for c in [999, 1001, -1, 0]:
        p = shard(1000, count=c)
        start_case("a later shard whose header counts %d of 1000" % c, lambda p=p: lst(good, p), False, [p])
    p = shard(0)
    start_case("a later empty token file (count 0)", lst(good, p), True)  # skipped: no batch
    p = J("tiny.bin")
    open(p, "wb").write(b"\0" * 100)
    start_case("a later 100-byte file", lst(good, p), False, [p])
    p = J("empty.bin")
    open(p, "wb").close()
    start_case("a later empty file", lst(good, p), False, [p])
    # shards shorter than one batch (64 + 1 tokens)
    s64, s65 = shard(64), shard(65)
    start_case("only shards shorter than one batch", lst(s64, s64, shard(10)), False, [s64])
    start_case("one shard of 64 tokens", s64, False, [s64])
    start_case("short shards between good ones (skipped)", lst(s64, good, s64, good), True, steps=20)
    start_case("shards of exactly one batch + 1", lst(s65, s65, s65), True, steps=7)
    start_case("the same shard listed twice", lst(good, good), True, steps=20)
    start_case("the same glob listed twice", lst(J("g1", "x_a.bin"), J("g1", "x_a*.bin")), True, steps=20)
    lit = J("lit[1].bin")
    shutil.copy(good, lit)
    start_case("a file whose name holds glob characters", lit, True)
    start_case("a list with a long path", lst(good, J("x" * 300 + ".bin")), False, ["x" * 100])
    start_case("a path of 5000 characters", "/" + "a/" * 2500 + "x.bin", False, ["data"])

    # later shards that are bad: found when reached (exit 1, naming it, last good saved)
    for pos in [0, 1, 63, 64, 500, 999]:
        later_case("an id of 256 at token %d of shard 2" % pos,
                   lambda pos=pos: lst(good, shard(1000, bad_at=pos)), 40, 15 if pos < 961 else 15,
                   lambda spec: spec[1:-1].split(", ")[1])
    later_case("an id of 65535 in shard 3", lambda: lst(good, good, shard(1000, bad_at=7, bad=65535)),
               40, 30, lambda spec: spec[1:-1].split(", ")[2])
    later_case("uint32 shard 2 with an id of 2^31", lambda: lst(w32, shard(1000, w=4, bad_at=3, bad=1 << 31)),
               40, 15, lambda spec: spec[1:-1].split(", ")[1])
    later_case("an id of 300 in shard 2 of a glob", lambda: (
        os.makedirs(J("lz"), exist_ok=True), shutil.copy(good, J("lz", "a.bin")),
        shutil.copy(shard(1000, bad_at=100, bad=300), J("lz", "b.bin")), J("lz", "*.bin"))[-1],
        40, 15, lambda spec: J("lz", "b.bin"))

    # ... as data.val: found by the validation that reaches it (after step 5: batch 15 of
    # 20 is in shard 2), exit 1 naming it, step 5 saved
    for label, bad in [("an id of 300", lambda: shard(1000, bad_at=500, bad=300)),
                       ("uint32 ids", lambda: shard(1000, w=4))]:
        def go(label=label, bad=bad):
            what = "data.val: shard 2 with %s" % label
            b = bad()
            kind, rc, out = train(None, 12, ["--set", "data.val=" + lst(good, b), "--set", "data.val_every=5",
                                             "--set", "data.val_batches=20"])
            if label == "uint32 ids":  # widths are checked at the start
                return judge(r, A, what, kind, rc, out, False, [b])
            if kind:
                return r.record(A, kind, what, out)
            if rc != 1 or b not in errors(out) or last_step(run_dir) != 5 or latest_step(run_dir) != 5:
                return r.record(A, "wrong", what, "want exit 1 naming %s, steps 1..5 and their checkpoint: rc %s, "
                                "last step %d, latest %d\n%s" % (b, rc, last_step(run_dir), latest_step(run_dir), out))
            r.record(A, "ok", what)
        cases.append((label, go))

    # later shards that change under the run: removed, truncated, corrupted, replaced
    big = shard(64 * 300 + 1)  # 300 batches: time to act after the first steps

    def act(target, how):
        def during(stop):
            csv = os.path.join(run_dir, "losses.csv")
            while not stop.is_set():
                try:
                    if open(csv).read().count("\n") >= 3:
                        break
                except OSError:
                    pass
                time.sleep(0.002)
            if not stop.is_set():
                how(target)
        return during

    def replace_dir(p):
        os.remove(p)
        os.mkdir(p)

    def replace_fifo(p):
        os.remove(p)
        os.mkfifo(p)

    def replace_zero(p):
        os.remove(p)
        os.symlink("/dev/zero", p)

    def overwrite_id(p):
        with open(p, "r+b") as f:
            f.seek(1024 + 2 * 10)
            f.write(b"\xff\xff")

    def flip(p):
        with open(p, "r+b") as f:
            f.seek(1024 + 2 * 500)
            f.write(b"\x01\x00")

    hows = [("removed", os.remove), ("truncated", lambda p: os.truncate(p, 1500)),
            ("grown", lambda p: open(p, "ab").write(b"\0\0")), ("emptied", lambda p: os.truncate(p, 0)),
            ("given an id of 65535", overwrite_id), ("given another id", flip),
            ("replaced by a directory", replace_dir), ("replaced by a FIFO", replace_fifo),
            ("replaced by /dev/zero", replace_zero)]
    for label, how in hows:
        def go(label=label, how=how):
            what = "shard 2 %s while the run reads shard 1" % label
            s2 = shard(1000)
            kind, rc, out = train(lst(big, s2), 310, during=act(s2, how), limit=120)
            if kind:
                return r.record(A, kind, what, out)
            if rc == 0 and label == "given another id":
                return r.record(A, "ok", what)  # valid ids: read as they are now
            if rc == 0 and last_step(run_dir) < 300:
                return r.record(A, "wrong", what, "exit 0 before the end\n" + out)
            if rc == 0:  # raced: changed after it was read
                return r.record(A, "ok", what + " (changed too late: not seen)")
            done = last_step(run_dir)
            if rc != 1 or s2 not in errors(out) or done != 300 or latest_step(run_dir) != 300:
                return r.record(A, "wrong", what, "want exit 1 naming %s after step 300 with its "
                                "checkpoint: rc %s, last step %d, latest %d\n%s" % (
                                    s2, rc, done, latest_step(run_dir), out))
            r.record(A, "ok", what)
        cases.append(("shard 2 " + label, go))

    # 10,000 shards: a glob under a limit of 64 descriptors; a list of 1,000 (relative
    # paths: a list holds at most 16 KB of them), and one of 10,000, refused for its length
    many = J("many")
    os.mkdir(many)
    one = open(s65, "rb").read()
    for i in range(10000):
        open(os.path.join(many, "m%05d.bin" % i), "wb").write(one)
    def list_cfg(name, k):
        p = base_config(d, name)
        text = open(p).read().replace("  train: " + os.path.join(REPO, "data/tiny/train.bin"),
                                      "  train:\n" + "".join("    - many/m%05d.bin\n" % i for i in range(k)))
        open(p, "w").write(text)
        return p
    cfg1k, cfg10k = list_cfg("many1k.yaml", 1000), list_cfg("many10k.yaml", 10000)

    def limited(spec, cfg_path, what, count=10000):
        def go():
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
            try:
                kind, rc, out = train(spec, 30, cfg_path=cfg_path, limit=120)
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            judge(r, A, what, kind, rc, out, True, check=lambda out: None if "%d shards" % count in out
                  else "no build report of %d shards" % count)
        cases.append((what, go))
    limited(None, cfg1k, "a list of 1,000 shards, 64 descriptors", 1000)
    limited(os.path.join(many, "m*.bin"), None, "a glob of 10,000 shards, 64 descriptors")

    def too_long():
        kind, rc, out = train(None, 3, cfg_path=cfg10k)
        judge(r, A, "a list of 10,000 shards (over 16 KB of paths)", kind, rc, out, False, [cfg10k, "glob"])
    cases.append(("a list of 10,000 shards", too_long))

    # resumes: another shard list; the manifest's record of the stream edited
    s3 = [shard(1000, off=1000 * i) for i in range(3)]

    def resumed(what, spec, damage, valid=True, check=None):
        def go():
            shutil.rmtree(run_dir, ignore_errors=True)
            kind, rc, out = r.run(["--config", cfg, "--set", "data.train=" + lst(*s3), "--set", "train.steps=20",
                                   "--set", "output.checkpoint_every=20"], limit=60, cwd=d)
            if kind or rc:
                return r.record(A, kind or "wrong", what + " (the run to resume)", out)
            step = os.path.join(run_dir, "checkpoints", "step_0000020")
            if damage:
                damage(step)
            kind, rc, out = r.run(["--config", cfg, "--set", "data.train=" + spec, "--set", "train.steps=24",
                                   "--resume"], limit=60, cwd=d)
            judge(r, A, what, kind, rc, out, valid, check=check)
        cases.append((what, go))

    def warns(*names):
        return lambda out: None if all(x in out for x in names) and "warning:" in out else \
            "no warning naming %s" % (names,)
    resumed("resume with the same list", lst(*s3), None,
            check=lambda out: None if "as the run that wrote the checkpoint would have" in out else "no 'same' line")
    says = lambda text: (lambda out: None if text in out else "no %r" % text)
    resumed("resume with the last shard left out (batch 20 where it was)", lst(s3[0], s3[1]), None,
            check=says("is not the stream the checkpoint was written with (3 shard(s), 3000 tokens then; "
                       "2 shard(s), 2000 tokens now), but batch 20 is where it was"))
    resumed("resume with the shards rotated", lst(s3[1], s3[2], s3[0]), None,
            check=warns(os.path.basename(s3[1]), os.path.basename(s3[2])))
    resumed("resume with one other file", good, None, check=warns(os.path.basename(good)))
    edits = [("batch", "-1"), ("batch", "99999999999999999999"), ("batch", "2147483648"), ("shard", "-1"),
             ("shard", "3"), ("shard", "2147483647"), ("shard", "-2147483648"), ("token", "-1"),
             ("token", "99999999999999999999"), ("token", "3000"), ("shards", "0"), ("shards", "-5"),
             ("tokens", "-1"), ("width", "3"), ("file", ""), ("file", "x" * 5000), ("file", "../../etc/passwd"),
             ("hash", "zz"), ("hash", "")]
    edits = [[e] for e in edits] + [[("batch", "5"), ("shard", "2147483647")], [("batch", "5"), ("shard", "-2147483648")],
                                    [("batch", "5"), ("token", "-1")], [("batch", "5"), ("shards", "1")]]
    unsame = lambda out: "an edited record called the same" if "as the run that wrote the checkpoint would have" \
        in out else None
    for kvs in edits:
        def damage(step, kvs=kvs):
            body = open(os.path.join(step, "manifest")).read()
            rec = re.search(r"extra\.data_train = (.*)", body).group(1)
            for k, v in kvs:
                rec = re.sub(r"\b%s=\S*" % k, "%s=%s" % (k, v), rec) if k != "file" else \
                    re.sub(r"file=.*", "file=" + v, rec)
            fuzz.manifest_set(step, [("extra.data_train", rec)])
        resumed("resume, manifest's data_train %s" % " ".join("%s=%s" % (k, v[:20]) for k, v in kvs), lst(*s3),
                damage, True, check=unsame)
    for rec in ["", "garbage", "shards=3", "x" * 3000, "shards=3 tokens=3000 width=2 hash=0 batch=20 shard=1 "
                "token=320 file=" + "é" * 10]:
        resumed("resume, manifest's data_train = %r" % rec[:30], lst(*s3),
                lambda step, rec=rec: fuzz.manifest_set(step, [("extra.data_train", rec)]), True, check=unsame)
    resumed("resume, manifest's data_train removed", lst(*s3),
            lambda step: fuzz.manifest_set(step, [("extra.data_train", None)]), True)

    return run_cases(cases, n, rng, d)


# ---- sample ----------------------------------------------------------------------------

def fuzz_sample(r, n, rng, tmp):
    A = "cli-sample"
    d = os.path.join(tmp, "sample")
    os.makedirs(d)
    cfg = base_config(d)
    run_dir = os.path.join(d, "run")
    kind, rc, out = r.run(["--config", cfg, "--set", "train.steps=3"], limit=120, cwd=d)
    assert rc == 0, out
    ck = os.path.join(run_dir, "checkpoints")
    ids = ["--prompt-ids", "1,2,3", "--max-new-tokens", "8", "--ids"]

    def sample(args, limit=60):
        return r.run(["sample"] + args, limit=limit, cwd=d)

    def new_ids(out):
        lines = [x for x in out.split("\n") if re.fullmatch(r"\d+(,\d+)*", x)]
        return lines[-1] if lines else None

    kind, rc, out = sample(["--checkpoint", ck] + ids + ["--temperature", "0"])
    greedy = new_ids(out)
    assert rc == 0 and greedy, out
    kind, rc, out = sample(["--checkpoint", ck] + ids)
    intact = new_ids(out)
    cases = []

    def case(what, args, valid, names=(), check=None, limit=60):
        def go():
            kind, rc, out = sample(args() if callable(args) else args, limit)
            judge(r, A, what, kind, rc, out, valid, names, check)
        cases.append((what, go))

    def equals(want, label):
        return lambda out: None if new_ids(out) == want else "ids %s, want %s (%s)" % (new_ids(out), want, label)

    base = ["--checkpoint", ck, "--prompt-ids", "1,2,3", "--max-new-tokens", "8", "--ids"]
    for v, ok in [("-1", False), ("0", True), ("nan", False), ("-nan", False), ("inf", False), ("-inf", False),
                  ("1e30", True), ("1e31", False), ("1e-30", True), ("1e-40", True), ("1e-45", True),
                  ("1e-46", True), ("4.9e-324", True), ("1e-400", True), ("", False), ("1x", False),
                  ("0.5.5", False), ("--ids", False), ("1,5", False), (" 1", None), ("0x1p-2", None),
                  ("-0", True), ("1e308", False)]:
        small = ok and v not in ("0", "-0", "1e30") and float(v) < 1e-20
        case("--temperature %r" % v, base + ["--temperature", v], ok, ["--temperature"],
             equals(greedy, "greedy: temperature -> 0") if small else None)
    for v, ok in [("0", True), ("-1", False), ("1", True), ("2", True), ("255", True), ("256", True),
                  ("257", True), ("2147483647", True), ("2147483648", False), ("4294967297", False),
                  ("1e3", False), ("", False), ("5x", False), ("+5", False), (" 5", False), ("0x10", False)]:
        case("--top-k %r" % v, base + ["--top-k", v], ok, ["--top-k"],
             equals(greedy, "top-k 1 is greedy") if v == "1" else None)
    for v, ok in [("-1", False), ("0", False), ("-0", False), ("1e-300", True), ("1e-50", True),
                  ("0.5", True), ("1", True), ("1.0000001", False), ("1.5", False), ("nan", False),
                  ("inf", False), ("", False), ("0.5x", False)]:
        case("--top-p %r" % v, base + ["--top-p", v], ok, ["--top-p"],
             equals(greedy, "top-p -> 0 is greedy") if v in ("1e-300", "1e-50") else None)
    seq_ok = lambda k: (lambda out: None if new_ids(out) is not None and len(new_ids(out).split(",")) == k
                        else "want %d new ids, got %s" % (k, new_ids(out)))
    for v, ok, k in [("0", True, None), ("-1", False, 0), ("1", True, 1), ("28", True, 28), ("29", True, 29),
                     ("30", True, 29), ("1000", True, 29), ("2147483647", True, 29), ("2147483648", False, 0),
                     ("1099511627776", False, 0), ("", False, 0), ("8x", False, 0), ("1e3", False, 0),
                     ("+8", False, 0), (" 8", False, 0), ("-0", None, 0)]:
        a = ["--checkpoint", ck, "--prompt-ids", "1,2,3", "--max-new-tokens", v, "--ids"]
        case("--max-new-tokens %r" % v, a, ok, ["--max-new-tokens"], seq_ok(k) if ok and k else None)
    V = 256
    for v, ok, names in [("0", True, ()), ("255", True, ()), ("256", False, ["256"]), ("-1", False, ["--prompt-ids"]),
                         ("a", False, ["--prompt-ids"]), ("", False, ["--prompt-ids"]), ("1,,2", False, ["--prompt-ids"]),
                         ("1,", False, ["--prompt-ids"]), (",1", False, ["--prompt-ids"]), (" 1", False, ["--prompt-ids"]),
                         ("+1", False, ["--prompt-ids"]), ("1 ,2", False, ["--prompt-ids"]), ("0x1", False, ["--prompt-ids"]),
                         ("1e2", False, ["--prompt-ids"]), ("99999999999999999999", False, ["--prompt-ids"]),
                         ("2147483648", False, ["--prompt-ids"]), ("1;2", False, ["--prompt-ids"]),
                         (",".join(["7"] * 31), True, ()), (",".join(["7"] * 32), False, ["max_seq_len"]),
                         (",".join(["7"] * 5000), False, ["max_seq_len"]), ("1" * 31, False, ["--prompt-ids"]),
                         ("é", False, ["--prompt-ids"])]:
        case("--prompt-ids %r" % v[:30], ["--checkpoint", ck, "--prompt-ids", v, "--max-new-tokens", "4", "--ids"],
             ok, names)
    for v, ok in [("", False), ("a", True), ("x" * 31, True), ("x" * 32, False), ("x" * 100000, False),
                  ("é€😀", True), ("\x01\x7f", True), ("\n", True)]:
        case("--prompt %r" % v[:20], ["--checkpoint", ck, "--prompt", v, "--max-new-tokens", "4"], ok,
             ["prompt"])
    for v, ok in [("0", True), ("18446744073709551615", True), ("18446744073709551616", False), ("-1", False),
                  (" -1", False), ("+1", False), ("1x", False), ("", False), ("0x10", False), ("1e3", False)]:
        case("--seed %r" % v, base + ["--seed", v], ok, ["--seed"])
    for v, ok in [("0", True), ("1", True), ("-1", False), ("4097", False), ("2x", False), ("", False)]:
        case("--threads %r" % v, base + ["--threads", v], ok, ["--threads"])
    for flag, v in [("--device", "gpu"), ("--device", ""), ("--precision", "fp16"), ("--precision", "")]:
        case("%s %r" % (flag, v), base + [flag, v], False, [flag])
    for v, ok in [("none", True), ("1,2", True), ("256", False), ("-1", False), ("", False), ("a", False),
                  (",".join(["1"] * 16), True), (",".join(["1"] * 17), False)]:
        case("--eos %r" % v[:20], base + ["--eos", v], ok, ["--eos"])
    # options: unknown, missing values, repeated, conflicting
    for flag in ["--checkpoint", "--init-from", "--config", "--tokenizer", "--prompt", "--prompt-ids", "--eos",
                 "--device", "--precision", "--set", "--max-new-tokens", "--temperature", "--top-k", "--top-p",
                 "--seed", "--threads"]:
        case("%s without its value" % flag, ["--checkpoint", ck, "--prompt", "a", "--max-new-tokens", "2", flag],
             False, [flag])
    for a, names in [(["--bogus"], ["--bogus"]), (["-x"], ["-x"]), (["extra"], ["extra"]), (["--ids=1"], ["--ids=1"]),
                     (["--temperature=0"], ["--temperature=0"]), (["--help", "x"], ["--help"])]:
        case("sample with %s" % a, base + a, False, names)
    case("no model", ["--prompt", "a", "--max-new-tokens", "2"], False, ["--checkpoint"])
    case("two models", base + ["--config", cfg], False, ["--checkpoint"])
    case("no prompt", ["--checkpoint", ck, "--max-new-tokens", "2"], False, ["--prompt"])
    case("two prompts", base + ["--prompt", "a"], False, ["--prompt"])
    case("no --max-new-tokens", ["--checkpoint", ck, "--prompt", "a"], False, ["--max-new-tokens"])
    case("--set without --config", base + ["--set", "train.seed=1"], False, ["--set"])
    case("a config", ["--config", cfg, "--prompt", "ab", "--max-new-tokens", "3"], True)
    case("a config and --set", ["--config", cfg, "--set", "train.seed=7", "--prompt", "ab", "--max-new-tokens", "3"],
         True)
    case("a config and a bad --set", ["--config", cfg, "--set", "train.sed=7", "--prompt", "a",
                                      "--max-new-tokens", "3"], False, ["train.sed"])
    case("a config and 65 --set", ["--config", cfg] + ["--set", "train.seed=1"] * 65 +
         ["--prompt", "a", "--max-new-tokens", "3"], False, ["--set"])
    case("a missing config", ["--config", os.path.join(d, "none.yaml"), "--prompt", "a", "--max-new-tokens", "3"],
         False, [os.path.join(d, "none.yaml")])
    case("a config with no checkpoint's vocab (llama, no ffn)", ["--config", cfg, "--set", "model.arch=llama",
                                                                  "--prompt", "a", "--max-new-tokens", "3"], None)
    case("a missing tokenizer", base + ["--tokenizer", os.path.join(d, "tok.json")], False,
         [os.path.join(d, "tok.json")])
    case("a tokenizer that is a directory", base + ["--tokenizer", d], False, [d])
    case("an --init-from that is no directory", ["--init-from", cfg, "--prompt", "a", "--max-new-tokens", "2"],
         False, [cfg])
    case("an --init-from of an empty directory", ["--init-from", run_dir + "/checkpoints/latest", "--prompt", "a",
                                                  "--max-new-tokens", "2"], False, ["config.json"])
    for label, path in [("missing", os.path.join(d, "nope")), ("a file", cfg), ("/dev/zero", "/dev/zero"),
                        ("an empty directory", tmp)]:
        case("--checkpoint %s" % label, ["--checkpoint", path, "--prompt", "a", "--max-new-tokens", "2"], False,
             [path])

    # damaged checkpoints: the damage refused naming a file, or loaded with the intact ids
    step = os.path.join(ck, "step_0000003")
    x = os.path.join(d, "x")

    def damaged(what, damage):
        def go():
            shutil.rmtree(x, ignore_errors=True)
            shutil.copytree(ck, x, symlinks=True)
            damage(os.path.join(x, "step_0000003"))
            kind, rc, out = sample(["--checkpoint", x, "--prompt-ids", "1,2,3", "--max-new-tokens", "8", "--ids"])
            judge(r, A, what, kind, rc, out, None, check=equals(intact, "the intact checkpoint's"))
            if not kind and rc and x not in errors(out):
                r.record(A, "wrong", what + " (message)", "the error names no file of %s\n%s" % (x, out))
        cases.append((what, go))

    def flip(S, name, off, mask):
        p = os.path.join(S, name)
        b = bytearray(open(p, "rb").read())
        b[off % len(b)] ^= mask
        open(p, "wb").write(bytes(b))
    size = os.path.getsize(os.path.join(step, "shard_00000.ckpt"))
    msize = os.path.getsize(os.path.join(step, "manifest"))
    for k in range(60):
        off, mask = rng.randrange(size), rng.randrange(1, 256)
        damaged("flip shard byte %d ^ 0x%02x" % (off, mask), lambda S, off=off, mask=mask: flip(S, "shard_00000.ckpt", off, mask))
    for k in range(20):
        off, mask = rng.randrange(msize), rng.randrange(1, 256)
        damaged("flip manifest byte %d ^ 0x%02x" % (off, mask), lambda S, off=off, mask=mask: flip(S, "manifest", off, mask))
    J = os.path.join
    damaged("manifest removed", lambda S: os.remove(J(S, "manifest")))
    damaged("manifest empty", lambda S: open(J(S, "manifest"), "w").close())
    damaged("shard removed", lambda S: os.remove(J(S, "shard_00000.ckpt")))
    damaged("shard truncated", lambda S: os.truncate(J(S, "shard_00000.ckpt"), size // 2))
    damaged("shard a FIFO", lambda S: (os.remove(J(S, "shard_00000.ckpt")), os.mkfifo(J(S, "shard_00000.ckpt"))))
    damaged("manifest a FIFO", lambda S: (os.remove(J(S, "manifest")), os.mkfifo(J(S, "manifest"))))
    damaged("latest dangling", lambda S: (os.remove(J(os.path.dirname(S), "latest")),
                                          os.symlink("step_0000099", J(os.path.dirname(S), "latest"))))
    for k, v in [("extra.model", "V=256 Vp=256 maxT=32 L=200000000 NH=2 C=16 tied=1"),
                 ("extra.model", "V=256 Vp=256 maxT=2147483647 L=2 NH=2 C=16 tied=1"),
                 ("extra.model", "V=0 Vp=256 maxT=32 L=2 NH=2 C=16 tied=1"), ("step", "-1"), ("world_size", "0")]:
        damaged("manifest %s = %s (crc fixed)" % (k, v), lambda S, k=k, v=v: fuzz.manifest_set(S, [(k, v)]))

    return run_cases(cases, n, rng, d)


# ---- plot ------------------------------------------------------------------------------

HEADER = "step,loss,lr,grad_norm,tokens_per_s,step_ms\n"


def fuzz_plot(r, n, rng, tmp):
    A = "cli-plot"
    d = os.path.join(tmp, "plot")
    os.makedirs(d)
    seq = [0]

    def rundir(losses=None, val=None):
        seq[0] += 1
        p = os.path.join(d, "r%03d" % seq[0])
        os.mkdir(p)
        if losses is not None:
            open(os.path.join(p, "losses.csv"), "wb").write(losses if isinstance(losses, bytes) else losses.encode())
        if val is not None:
            open(os.path.join(p, "val_losses.csv"), "wb").write(val if isinstance(val, bytes) else val.encode())
        return p

    def rows(k, fn=lambda i: "%d,%.4f,0.001,1.0,12000.0,5.333" % (i + 1, 5 - i * 0.001)):
        return HEADER + "".join(fn(i) + "\n" for i in range(k))

    cases = []

    def clean(out_path):
        def check(out):
            if not os.path.exists(out_path) or os.path.getsize(out_path) < 100:
                return "no picture at " + out_path
            if out_path.endswith(".svg"):
                t = open(out_path, errors="replace").read()
                if re.search(r"\b(nan|inf)\b", t, re.I):
                    return "NaN or inf in the SVG"
            return None
        return check

    def case(what, make, valid, names=(), extra=(), limit=60, out_ext=".svg"):
        def go():
            dirs = make()
            dirs = dirs if isinstance(dirs, list) else [dirs]
            out = os.path.join(d, "out%s" % out_ext)
            if os.path.exists(out):
                os.remove(out)
            kind, rc, text = r.run(["plot"] + dirs + ["--out", out] + list(extra), limit=limit, cwd=d)
            nm = [s(dirs) if callable(s) else s for s in names] or [dirs[-1]]
            judge(r, A, what, kind, rc, text, valid, nm, clean(out) if valid else None)
        cases.append((what, go))

    L = lambda dirs: dirs[-1] + "/losses.csv"
    case("a good run", lambda: rundir(rows(50)), True)
    case("one row", lambda: rundir(rows(1)), True)
    case("one row at step 0", lambda: rundir(HEADER + "0,5,0.1,1,1000,64\n"), True)
    case("no losses.csv", lambda: rundir(), False, [lambda ds: ds[-1]])
    case("val_losses.csv alone", lambda: rundir(None, "step,val_loss\n1,5\n"), False, [lambda ds: ds[-1]])
    case("empty losses.csv", lambda: rundir(""), False, [L])
    case("header only", lambda: rundir(HEADER), False, [L])
    case("header without newline", lambda: rundir(HEADER[:-1]), False, [L])
    case("a header of other columns", lambda: rundir("a,b,c\n1,2,3\n"), False, [L])
    case("a header of 100 columns", lambda: rundir(",".join("c%d" % i for i in range(100)) + "\n1\n"), False, [L])
    case("a header of 1 MB", lambda: rundir("step,loss," + "x" * 1000000 + "\n1,2,3\n"), None)
    case("losses.csv a directory", lambda: (lambda p: (os.mkdir(p + "/losses.csv"), p)[1])(rundir()), False, [L])
    case("losses.csv a FIFO", lambda: (lambda p: (os.mkfifo(p + "/losses.csv"), p)[1])(rundir()), False, [L])
    case("losses.csv -> /dev/zero", lambda: (lambda p: (os.symlink("/dev/zero", p + "/losses.csv"), p)[1])(rundir()),
         False, [L])
    case("losses.csv dangling", lambda: (lambda p: (os.symlink("/nowhere", p + "/losses.csv"), p)[1])(rundir()),
         False, [lambda ds: ds[-1]])
    case("a run dir that is a file", lambda: (open(os.path.join(d, "f"), "w").close(), os.path.join(d, "f"))[1],
         False, [os.path.join(d, "f")])
    case("a missing run dir", lambda: os.path.join(d, "missing"), False, [os.path.join(d, "missing")])
    for label, row, ok in [("NaN loss", "2,nan,0.1,1,1000,64", True), ("inf loss", "2,inf,0.1,1,1000,64", True),
                           ("-inf loss", "2,-inf,0.1,1,1000,64", True), ("1e308 loss", "2,1e308,0.1,1,1000,64", True),
                           ("-1e308 loss", "2,-1e308,0.1,1,1000,64", True), ("1e-320 loss", "2,1e-320,0.1,1,1000,64", True),
                           ("negative loss", "2,-5,0.1,1,1000,64", True), ("NaN lr", "2,5,nan,1,1000,64", True),
                           ("1e308 lr", "2,5,1e308,1,1000,64", True), ("-1e308 lr", "2,5,-1e308,1,1000,64", True),
                           ("NaN tokens_per_s", "2,5,0.1,1,nan,64", True), ("1e308 step_ms", "2,5,0.1,1,1e308,1e308", True),
                           ("negative step", "-1,5,0.1,1,1000,64", False), ("NaN step", "nan,5,0.1,1,1000,64", False),
                           ("inf step", "inf,5,0.1,1,1000,64", False), ("1e308 step", "1e308,5,0.1,1,1000,64", False),
                           ("step 1.5", "1.5,5,0.1,1,1000,64", False), ("step 2e15", "2000000000000000,5,0.1,1,1000,64", False),
                           ("step 1e15 (then 3)", "1000000000000000,5,0.1,1,1000,64", False), ("a word", "2,five,0.1,1,1000,64", False),
                           ("an empty field", "2,,0.1,1,1000,64", False), ("too few columns", "2,5,0.1", False),
                           ("too many columns", "2,5,0.1,1,1000,64,7", False), ("200 columns", "2" + ",5" * 199, False),
                           ("a 1 MB line", "2,5,0.1,1,1000," + "6" * 1000000, True), ("a 1 MB word", "2,5,0.1,1,1000,6" + "x" * 1000000, False),
                           ("duplicated step", "1,5,0.1,1,1000,64", False), ("step going down", "0,5,0.1,1,1000,64", False),
                           ("an empty line", "", False), ("a NUL", "2,5\0,0.1,1,1000,64", False), ("CRLF", "2,5,0.1,1,1000,64\r", True),
                           ("hex", "2,0x10,0.1,1,1000,64", None), ("spaces", " 2 , 5 ,0.1,1,1000,64", None),
                           ("latin-1", "2,5\xe9,0.1,1,1000,64", False)]:
        text = (HEADER + "1,5,0.1,1,1000,64\n" + row + "\n" + "3,4,0.1,1,1000,64\n")
        case("a row with " + label, lambda text=text: rundir(text.encode("latin-1")), ok, [L])
        last = (HEADER + "1,5,0.1,1,1000,64\n" + row).encode("latin-1")
        case("a last row (no newline) with " + label, lambda last=last: rundir(last), True if ok else None)
    for label, text, ok in [("only NaN losses", HEADER + "1,nan,0.1,1,1000,64\n2,nan,0.1,1,1000,64\n", True),
                            ("only inf losses", HEADER + "1,inf,inf,1,1000,64\n2,-inf,-inf,1,1000,64\n", True),
                            ("equal losses", HEADER + "1,5,0,1,1000,64\n2,5,0,1,1000,64\n", True),
                            ("zero losses", HEADER + "1,0,0,1,1000,64\n2,0,0,1,1000,64\n", True),
                            ("losses 1e-308 and 1e308", HEADER + "1,1e-308,1e-308,1,1000,64\n2,1e308,1e308,1,1000,64\n", True),
                            ("denormal losses", HEADER + "1,5e-324,5e-324,1,1000,64\n2,1e-323,1e-323,1,1000,64\n", True),
                            ("steps 0 and 1e15", HEADER + "0,5,0.1,1,1000,64\n1000000000000000,4,0.1,1,1000,64\n", True),
                            ("unsorted", HEADER + "2,5,0.1,1,1000,64\n1,4,0.1,1,1000,64\n", False),
                            ("steps and columns only", "step,loss\n1,5\n2,4\n", True),
                            ("columns reordered", "loss,step\n5,1\n4,2\n", True),
                            ("a column twice", "step,step,loss\n1,2,5\n", None)]:
        for ext, extra in [(".svg", ()), (".svg", ("--log-y",)), (".png", ("--x", "tokens"))]:
            case("%s %s%s" % (label, ext, " ".join(extra)), lambda text=text: rundir(text), ok if not (
                extra and extra[0] == "--x" and label in ("steps and columns only", "columns reordered")) else False,
                 [L], extra=extra, out_ext=ext)
    for label, val, ok in [("a good val_losses.csv", "step,val_loss\n1,5\n2,4\n", True),
                           ("an empty val_losses.csv", "", False), ("a header-only val_losses.csv", "step,val_loss\n", False),
                           ("val NaN and 1e308", "step,val_loss\n1,nan\n2,1e308\n", True),
                           ("val steps past the run's", "step,val_loss\n1,5\n99999,4\n", True),
                           ("val step negative", "step,val_loss\n-1,5\n", False),
                           ("val without val_loss", "step,loss\n1,5\n", False)]:
        case(label, lambda val=val: rundir(rows(10), val), ok, [lambda ds: ds[-1] + "/val_losses.csv"])
        case(label + " --x tokens", lambda val=val: rundir(rows(10), val), ok,
             [lambda ds: ds[-1] + "/val_losses.csv"], extra=("--x", "tokens"))
    # big inputs and many runs, in time
    case("10^6 rows", lambda: rundir(rows(1000000)), True, limit=120)
    case("10^6 rows, --x tokens --log-y", lambda: rundir(rows(1000000)), True, extra=("--x", "tokens", "--log-y"),
         limit=120, out_ext=".png")
    case("50 runs", lambda: [rundir(rows(20, lambda i, k=k: "%d,%g,0.1,1,1000,64" % (i + 1, 5 - k * 0.01 - i * 0.001)))
                             for k in range(50)], True, limit=120)
    case("50 runs, one bad", lambda: [rundir(rows(5)) for _ in range(49)] + [rundir(HEADER)], False, [L])
    case("the same run 50 times", lambda: [rundir(rows(5))] * 50, True)
    # options
    good = rundir(rows(10))

    def opt(what, args, valid, names, limit=30):
        def go():
            kind, rc, out = r.run(["plot"] + args, limit=limit, cwd=d)
            judge(r, A, what, kind, rc, out, valid, names)
        cases.append((what, go))
    o = lambda f: os.path.join(d, f)
    opt("--out into a missing directory", [good, "--out", o("nodir/x.svg")], False, [o("nodir/x.svg")])
    opt("--out .pdf", [good, "--out", o("x.pdf")], False, ["x.pdf"])
    opt("--out without extension", [good, "--out", o("x")], False, ["--out"])
    opt("--out ''", [good, "--out", ""], False, ["--out"])
    opt("--out a directory", [good, "--out", d], False, [d])
    opt("--out a directory named .svg", [good, "--out", (os.makedirs(o("dir.svg"), exist_ok=True), o("dir.svg"))[1]],
        False, [o("dir.svg")])
    opt("--out .SVG", [good, "--out", o("x.SVG")], True, [])
    opt("--out /dev/full.svg", [good, "--out", "/dev/null/x.svg"], False, ["/dev/null/x.svg"])
    opt("--out without its value", [good, "--out"], False, ["--out"])
    opt("--x without its value", [good, "--x"], False, ["--x"])
    opt("--x epochs", [good, "--x", "epochs"], False, ["epochs"])
    opt("an unknown option", [good, "--bogus"], False, ["--bogus"])
    opt("--log-y=1", [good, "--log-y=1"], False, ["--log-y=1"])
    opt("no run", [], False, ["run"])
    opt("two runs without --out", [good, good], False, ["--out"])
    opt("-", [good, "-", "--out", o("y.svg")], False, ["-"])

    return run_cases(cases, n, rng, d)


# ---- flight ----------------------------------------------------------------------------

def flight_text(rank, world, waiting=None, rows=3, started=100.0, written=200.0, reason="a timeout"):
    t = "pptrain flight record\nrank %d of %d\nreason: %s\nstarted %.6f\nwritten %.6f\n" % (
        rank, world, reason, started, written)
    if waiting is not None:
        t += "waiting: rank %d for recv act s1<-s2 mb3 (step 5): 2.0 s\n" % waiting
    else:
        t += "waiting: nothing\n"
    for i in range(rows):
        t += "%d %.6f %s %s %s %s %s %s %s\n" % (i, 150.0 + i, "0.001", "0.002", "done", str(waiting or 0), "1024",
                                                 "5", "fwd s0 mb%d" % i)
    return t


def fuzz_flight(r, n, rng, tmp):
    A = "cli-flight"
    d = os.path.join(tmp, "flight")
    os.makedirs(d)
    seq = [0]
    cases = []

    def fdir(files):
        """files: {name: text | bytes | callable(path)}"""
        seq[0] += 1
        p = os.path.join(d, "f%03d" % seq[0])
        os.mkdir(p)
        for name, body in files.items():
            q = os.path.join(p, name)
            if callable(body):
                body(q)
            else:
                open(q, "wb").write(body if isinstance(body, bytes) else body.encode("utf-8", "surrogateescape"))
        return p

    def case(what, files, valid, names=None, extra=(), check=None, limit=30):
        def go():
            p = fdir(files())
            kind, rc, out = r.run(["flight", p] + list(extra), limit=limit, cwd=d)
            nm = names(p) if callable(names) else names if names is not None else [p]
            judge(r, A, what, kind, rc, out, valid, nm, check)
        cases.append((what, go))

    R = lambda k: "rank_%05d.txt" % k
    F = lambda k: (lambda p: [p + "/" + R(k)])
    good2 = lambda: {R(0): flight_text(0, 2, 1), R(1): flight_text(1, 2)}
    says = lambda s: (lambda out: None if s in out else "no %r in the output" % s)
    case("two good files", good2, True, check=says("head of the wait chain: rank 1"))
    case("an empty directory", lambda: {}, False)
    case("other files only", lambda: {"x.txt": "hi", "rank_0.log": "x"}, False)
    case("a file without records", lambda: {R(0): flight_text(0, 1, rows=0)}, True)
    case("two files without records", lambda: {R(0): flight_text(0, 2, 1, rows=0), R(1): flight_text(1, 2, rows=0)},
         True)
    case("an empty rank_00000.txt", lambda: {R(0): ""}, False, F(0))
    case("garbage rank_00000.txt", lambda: {R(0): "hello\nworld\n"}, False, F(0))
    case("binary rank_00000.txt", lambda: {R(0): bytes(rng.randrange(256) for _ in range(5000))}, False, F(0))
    case("NULs in a good file", lambda: {R(0): flight_text(0, 1).replace("fwd", "f\0w\0d").encode()}, None, F(0))
    case("a good file and a garbage one", lambda: {R(0): flight_text(0, 2, 1), R(1): "garbage\n"}, False, F(1))
    case("rank_00000.txt a directory", lambda: {R(0): os.mkdir}, False, F(0))
    case("rank_00000.txt a FIFO", lambda: {R(0): os.mkfifo}, False, F(0))
    case("rank_00000.txt -> /dev/zero", lambda: {R(0): lambda q: os.symlink("/dev/zero", q)}, False, F(0))
    case("rank_00000.txt -> /dev/urandom", lambda: {R(0): lambda q: os.symlink("/dev/urandom", q)}, False, F(0))
    case("rank_00000.txt dangling", lambda: {R(0): lambda q: os.symlink("/nowhere", q)}, False, F(0))
    case("a 50 MB rank file", lambda: {R(0): flight_text(0, 1) + ("9 1.0 a b c d e f " + "w" * 1000 + "\n") * 50000},
         True, limit=60)
    case("a line of 1 MB", lambda: {R(0): flight_text(0, 1) + "1 2.0 a b c d e f " + "w" * 1000000 + "\n"}, True)
    case("a reason of 1 MB", lambda: {R(0): flight_text(0, 1, reason="r" * 1000000)}, True)
    case("a waiting line of 1 MB", lambda: {R(0): flight_text(0, 1) + "waiting: rank 0 for " + "w" * 1000000 + "\n"},
         None)
    case("a truncated file", lambda: {R(0): flight_text(0, 2, 1)[:-20], R(1): flight_text(1, 2)[:40]}, None)
    for label, hdr, ok in [("rank -1", "rank -1 of 2", False), ("rank 2 of 2", "rank 2 of 2", False),
                           ("world 0", "rank 0 of 0", False), ("world -5", "rank 0 of -5", False),
                           ("world 2^31-1", "rank 0 of 2147483647", False), ("world 2^31", "rank 0 of 2147483648", False),
                           ("world 10^6", "rank 0 of 1000000", None), ("rank 2^31-1", "rank 2147483646 of 2147483647", False),
                           ("rank 99999999999", "rank 99999999999 of 2", False), ("rank x", "rank x of 2", False)]:
        case("header " + label, lambda hdr=hdr: {R(0): flight_text(0, 1).replace("rank 0 of 1", hdr)}, ok, F(0),
             limit=60)
    case("a name and header that disagree", lambda: {R(0): flight_text(1, 2), R(1): flight_text(1, 2)}, False, F(0))
    case("rank_0.txt beside rank_00000.txt (not a record's name: not read)",
         lambda: {R(0): flight_text(0, 1), "rank_0.txt": "garbage"}, True)
    case("files of different worlds", lambda: {R(0): flight_text(0, 2, 1), R(3): flight_text(3, 4)}, None)
    case("rank_99999.txt alone", lambda: {R(99999): flight_text(99999, 100000)}, True, limit=60)
    case("a file name rank_-1.txt", lambda: {"rank_-1.txt": flight_text(0, 1)}, None)
    for k in [2, 3, 10, 300]:
        case("a wait cycle of %d ranks" % k, lambda k=k: {R(i): flight_text(i, k, (i + 1) % k) for i in range(k)}, True,
             check=says("cycle"), limit=60)
    case("a rank waiting on itself", lambda: {R(0): flight_text(0, 1, 0)}, True, check=says("cycle"))
    case("a chain of 2000 ranks", lambda: {R(i): flight_text(i, 2000, i + 1 if i < 1999 else None, rows=1)
                                           for i in range(2000)}, True, limit=60)
    case("waiting on rank 2^31", lambda: {R(0): flight_text(0, 1).replace("waiting: nothing", "waiting: rank 2147483648 for x")},
         True)
    case("waiting on rank -7", lambda: {R(0): flight_text(0, 1).replace("waiting: nothing", "waiting: rank -7 for x")},
         True)
    case("waiting on a rank beyond the world", lambda: {R(0): flight_text(0, 2, 5), R(1): flight_text(1, 2)}, True)
    for label, row in [("time NaN", "1 nan 1 1 done 0 1 1 x"), ("time inf", "1 inf 1 1 done 0 1 1 x"),
                       ("time -inf", "1 -inf 1 1 done 0 1 1 x"), ("time 1e308", "1 1e308 1 1 done 0 1 1 x"),
                       ("seq 2^64", "18446744073709551616 1 1 1 done 0 1 1 x"), ("end NaN", "1 1 1 nan done 0 1 1 x"),
                       ("long fields", "1 1 " + "a" * 100 + " b c d e f x")]:
        case("a row with " + label, lambda row=row: {R(0): flight_text(0, 1) + "\n".join([row] * 50) + "\n"
                                                      + flight_text(0, 1).split("\n", 6)[6]}, None)
    for label, t, ok in [("started NaN", "started nan", None), ("written -inf", "written -inf", None)]:
        case(label, lambda t=t: {R(0): flight_text(0, 2, 1).replace(t.split()[0] + " 100.000000", t).replace(
            t.split()[0] + " 200.000000", t), R(1): flight_text(1, 2)}, ok)
    # options
    g = lambda: {R(0): flight_text(0, 1)}
    for args, ok, names in [(["--last", "2"], True, []), (["--last", "0"], True, []), (["--last", "abc"], False, ["--last"]),
                            (["--last", "-1"], False, ["--last"]), (["--last", "5x"], False, ["--last"]),
                            (["--last", "99999999999999999999999"], False, ["--last"]), (["--last"], False, ["--last"]),
                            (["--bogus"], False, ["--bogus"]), (["extra"], False, ["extra"])]:
        case("flight DIR %s" % " ".join(args), g, ok, lambda p, names=names: names, extra=args)

    def bare(what, args, ok, names):
        def go():
            kind, rc, out = r.run(["flight"] + args, limit=30, cwd=d)
            judge(r, A, what, kind, rc, out, ok, names)
        cases.append((what, go))
    bare("flight without DIR", [], False, ["DIR"])
    bare("flight of a missing DIR", [os.path.join(d, "none")], False, [os.path.join(d, "none")])
    bare("flight of a file", [os.path.join(REPO, "README.md")], False, [os.path.join(REPO, "README.md")])
    bare("flight --help", ["--help"], True, [])

    return run_cases(cases, n, rng, d)


# ---- the subcommands' options ---------------------------------------------------------

def fuzz_args(r, n, rng, tmp):
    A = "cli-args"
    d = os.path.join(tmp, "args")
    os.makedirs(d)
    cfg = base_config(d)
    cases = []

    def case(what, args, valid, names):
        def go():
            kind, rc, out = r.run(args, limit=30, cwd=d)
            judge(r, A, what, kind, rc, out, valid, names)
        cases.append((what, go))

    C = ["--config", cfg]
    for sub, pre in [("train", C + ["--print-config"]), ("schedule", ["schedule"] + C)]:
        case("%s: an unknown option" % sub, pre + ["--bogus"], False, ["--bogus"])
        case("%s: a stray word" % sub, pre + ["stray"], False, ["stray"])
        case("%s: --set without its value" % sub, pre + ["--set"], False, ["--set"])
        case("%s: --config without its value" % sub, pre + ["--config"], False, ["--config"])
        case("%s: --set of no key" % sub, pre + ["--set", "=1"], False, ["--set"])
        case("%s: --set without =" % sub, pre + ["--set", "train.steps"], False, ["train.steps"])
        for v in ["5x", "0x10", "1e3", "99999999999999999999", "-99999999999999999999", ""]:
            case("%s: train.steps=%r" % (sub, v), pre + ["--set", "train.steps=" + v], False, ["train.steps"])
        for v in [" 5", "5 "]:  # a YAML scalar's blanks
            case("%s: train.steps=%r" % (sub, v), pre + ["--set", "train.steps=" + v], None, ["train.steps"])
    case("train: --print-config with a stray word", C + ["--print-config", "stray"], False, ["stray"])
    case("train: --trace=1", C + ["--trace=1"], False, ["--trace=1"])
    case("train: --resume and --resume-if-present", C + ["--resume", "--resume-if-present"], False, ["--resume"])
    case("train: no --config", ["--set", "train.steps=1"], False, ["--config"])
    case("train: --resume ''", C + ["--resume", "", "--set", "output.dir=" + os.path.join(d, "run")], False,
         ["--resume"])
    case("train: --config of a directory", ["--config", d], False, [d])
    case("--version with a stray word", ["--version", "stray"], False, ["stray"])
    case("no arguments", [], False, ["--config"])
    case("an unknown subcommand", ["frobnicate"], False, ["frobnicate"])
    for flag in ["--svg", "--json", "--costs", "--plan"]:
        case("schedule: %s without its value" % flag, ["schedule"] + C + [flag], None, [flag])
    case("schedule --svg into a missing directory", ["schedule"] + C + ["--svg", os.path.join(d, "no/x.svg")], False,
         [os.path.join(d, "no/x.svg")])
    for args, names in [(["--bogus"], ["--bogus"]), (["--checkpoint"], ["--checkpoint"]), (["--out"], ["--out"]),
                        (["--checkpoint", d, "--out", os.path.join(d, "m.bin"), "--format", "xx"], ["xx"]),
                        (["--checkpoint", d, "--format", "hf", "--out", os.path.join(d, "h"), "--max-shard-size", "5ZB"], ["5ZB"]),
                        (["--checkpoint", d, "--format", "hf", "--out", os.path.join(d, "h"), "--max-shard-size", "-1"], ["-1"]),
                        (["--checkpoint", d, "--format", "hf", "--out", os.path.join(d, "h"), "--dtype", "fp8"], ["fp8"])]:
        case("export %s" % " ".join(args)[:60], ["export"] + args, False, names)
    txt = os.path.join(d, "t.txt")
    open(txt, "w").write("hello world\n" * 10)
    for args, names in [(["--bogus"], ["--bogus"]), (["--text"], ["--text"]), (["--text", txt, "--out"], ["--out"]),
                        (["--text", txt, "--out", os.path.join(d, "o.bin"), "--threads", "5x"], ["--threads"]),
                        (["--text", txt, "--out", os.path.join(d, "o.bin"), "--threads", "99999999999"], ["--threads"]),
                        (["--text", txt, "--out", os.path.join(d, "o.bin"), "--val-fraction", "nan"], ["--val-fraction"]),
                        (["--text", txt, "--out", os.path.join(d, "o.bin"), "--val-fraction", "2"], ["--val-fraction"]),
                        (["--text", txt, "--out", os.path.join(d, "o.bin"), "--shard-tokens", "0"], ["--shard-tokens"]),
                        (["--text", txt, "--out", os.path.join(d, "o.bin"), "--shard-tokens", "1e9x"], ["--shard-tokens"]),
                        (["--text", txt, "--out", os.path.join(d, "o.bin"), "--shard-tokens", "99999999999999999999999"],
                         ["--shard-tokens"])]:
        case("prepare-data %s" % " ".join(args)[-60:], ["prepare-data"] + args, False, names)
    return run_cases(cases, n, rng, d)


PARTS = [("shards", fuzz_shards, 0.2), ("sample", fuzz_sample, 0.35), ("plot", fuzz_plot, 0.25),
         ("flight", fuzz_flight, 0.12), ("args", fuzz_args, 0.08)]


def fuzz_cli(r, n, rng, parts=None):
    """The cli area: at most n cases over its five parts (shards, sample, plot, flight,
    args; `parts` a subset by name), each part's cases a seeded sample of its share."""
    tmp = tempfile.mkdtemp(prefix="fuzzcli.", dir=r.out)
    details = {}
    for name, fn, share in PARTS:
        if parts and name not in parts:
            continue
        t = time.time()
        sub = random.Random("%s-%d" % (name, rng.randrange(1 << 30)))
        details[name] = fn(r, max(1, int(n * share)), sub, tmp)
        details[name]["seconds"] = round(time.time() - t)
    shutil.rmtree(tmp, ignore_errors=True)
    return details
