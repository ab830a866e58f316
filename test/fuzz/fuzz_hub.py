#!/usr/bin/env python3
"""fuzz_hub.py — hostile Hugging Face directories for pptrain (issue 27's surfaces): config.json,
.safetensors files, sharded checkpoints' model.safetensors.index.json, read by
model.init_from (1 rank, and 2 pipeline ranks through scripts/pprun), by `pptrain sample
--init-from`, and written by `pptrain export --format hf`. Opt-in, as fuzz.py's areas are
(fuzz.py --area hub wires it in); `fuzz_hub(r, n, rng)` runs at most n cases through fuzz.py's
Runner and returns a dict of details.

Each case builds a damaged copy of a fixture of test/hf/ (gpt2, gpt2_hub, llama3, llama_mqa,
qwen2, mistral; a sharded llama3 written by export in the setup), trains 1 step from it (one
case in four on 2 pipeline ranks), and knows what it expects:
  valid     accepted, and the first loss is the intact directory's bit for bit (or, for an
            F16/BF16 rewrite, within 16-bit rounding): a refusal is `wrong`
  invalid   refused: exit non-zero with an "error:" line naming the damaged file (the
            .safetensors file, the index; for config.json anything in the directory: a
            config.json that disagrees with the weights is rightly refused naming those),
            output.dir not created; accepted is `wrong` (a silent wrong success), a refusal
            naming no file is `wrong`
  same      either; accepted, the loss must be the intact one bit for bit
  any       either; accepted, any loss (the case changes what the model computes)
  run       only a crash or hang counts (a valid file holding garbage values)
config.json mutations are judged by what transformers makes of them: a changed shape key
(hidden_size, heads, key/value heads, intermediate_size, vocab_size, n_positions, more
layers) must be refused, as the weights disagree; fewer layers leave weights unused, which
pptrain refuses (transformers warns) and an extra tensor likewise: invalid; GPT-2's head
count and a model_type within the Llama family load as another valid model: any; RoPE, norm
epsilon, activation, tying: any; every other key is inert: same. Layout variants that must
read the same values (tensors in another order, buffers the model class skips between them,
one shard per tensor) are imported at 0 steps on 1 and 2 ranks and exported
again, and compared tensor by tensor with the input (a tensor read from the wrong offset
shows there). `pptrain sample --init-from` on damaged directories and generation_config.json
files. Exports: into an existing directory or onto a file (refused, left as it was), under a
file or /proc, --max-shard-size and --dtype values (an accepted export must import to the
intact loss), killed at random moments (the output absent or complete and equal to an
uninterrupted export; a DIR.tmp.PID staging directory may stay).

Size: n caps the main plan (every index case, then safetensors and config.json cases half
and half, a seeded sample of each); about 160 cases more always run (layouts, sample,
export). n = 600: 731 cases, ~45 s on the ASan build; the whole plan (n large): ~5,100
cases, ~7 minutes. Areas recorded: hub-config, hub-st, hub-index, hub-layout, hub-sample,
hub-export.

Quick driver: python3 test/fuzz/fuzz_hub.py PPTRAIN OUTDIR [N]
"""
import json
import os
import random
import shutil
import struct
import tempfile

import fuzz

REPO = fuzz.REPO
HF = os.path.join(REPO, "test", "hf")
PPRUN = os.path.join(REPO, "scripts", "pprun")

BASE_YAML = """\
model:
  init_from: null
pipeline:
  microbatches: 2
train:
  batch_size: 2
  seq_len: 32
  steps: 1
data:
  train: {data}/train.bin
runtime:
  threads: 1
  timeout_s: 30
"""

# config.json keys by what a change to them means. DIM: the tensors' shapes follow from
# them, so a changed value must be refused (the tensors disagree). MODEL: a legitimate change
# of what the model computes (any loss). Everything else is inert for pptrain: accepted, the
# loss must stay bit for bit.
DIM = {"vocab_size", "hidden_size", "n_embd", "num_hidden_layers", "n_layer",
       "num_attention_heads", "n_head", "num_key_value_heads", "head_dim", "intermediate_size",
       "n_inner", "n_positions", "model_type"}
MODEL = {"rope_theta", "rms_norm_eps", "layer_norm_epsilon", "rope_scaling", "rope_parameters",
         "tie_word_embeddings", "hidden_act", "activation_function", "max_position_embeddings",
         "attention_bias", "mlp_bias", "sliding_window", "use_sliding_window",
         "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "n_ctx"}
DELETE = object()
HOSTILE = [DELETE, None, "x", "32", "", True, False, [], [1], {}, {"a": 1}, -1, 0, 1, 2, 3, 5, 7,
           31, 33, 64, 2 ** 31 - 1, 2 ** 31, 2 ** 32 + 32, 2 ** 40, 2 ** 63 - 1, -2 ** 63, 1.5,
           32.0, 0.0, -0.0, 1e-300, 1e308, -1e308, "x" * 300, "\u202e", "gpt2", "llama"]


# ---- safetensors in Python (the format: [Note: safetensors format] in safetensors.c) ----

class Obj(list):
    """A JSON object as the list of its (key, value) pairs, in the file's order."""


def st_read(path):
    """(header: an Obj of (key, value) pairs in file order, data bytes, N)."""
    b = open(path, "rb").read()
    n = struct.unpack_from("<Q", b)[0]
    return json.loads(b[8:8 + n], object_pairs_hook=Obj), b[8 + n:], n


def st_text(pairs):
    """Header text as the reference writes it (compact), padded to 8 with spaces."""
    def enc(v):
        if isinstance(v, Obj):
            return "{" + ",".join(json.dumps(k) + ":" + enc(x) for k, x in v) + "}"
        return json.dumps(v, separators=(",", ":"))
    t = "{" + ",".join(json.dumps(k) + ":" + enc(v) for k, v in pairs) + "}"
    return t + " " * (-len(t) % 8)


def st_write(path, head, data, n=None):
    """head: pairs (encoded here) or raw text/bytes; n: the length field (default: right)."""
    if isinstance(head, list):
        head = st_text(head)
    if isinstance(head, str):
        head = head.encode("utf-8", "surrogateescape")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head) if n is None else n & (2 ** 64 - 1)) + head + data)


def info(pairs):
    """{name: {dtype, shape, data_offsets}} of a parsed header (metadata left out)."""
    return {k: dict(v) for k, v in pairs if k != "__metadata__"}


def st_tensors(path):
    """{name: (dtype, shape, bytes)} of a file (for comparing an export with its input)."""
    pairs, data, _ = st_read(path)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in info(pairs).items()}


def dir_tensors(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    files = [os.path.join(d, "model.safetensors")] if not os.path.exists(idx) else \
        sorted({os.path.join(d, f) for f in json.load(open(idx))["weight_map"].values()})
    out = {}
    for f in files:
        out.update(st_tensors(f))
    return out


def f32_to_f16(b):
    n = len(b) // 4
    return struct.pack("<%de" % n, *struct.unpack("<%df" % n, b))


def f32_to_bf16(b):
    n = len(b) // 4
    u = struct.unpack("<%dI" % n, b)
    return struct.pack("<%dH" % n, *[((x + 0x7FFF + ((x >> 16) & 1)) >> 16) & 0xFFFF for x in u])


def repack(pairs, data, order=None, gap=0, convert=None, extra=()):
    """A new (pairs, data): tensors laid out again in `order` (names), `gap` bytes between
    them, each converted by convert(name, dtype, bytes) -> (dtype, bytes), plus extra
    (name, dtype, shape, bytes) tensors at the end."""
    inf = info(pairs)
    meta = [(k, v) for k, v in pairs if k == "__metadata__"]
    names = order or [k for k, _ in pairs if k != "__metadata__"]
    out, blob = [], b""
    items = [(k, inf[k]["dtype"], inf[k]["shape"], data[inf[k]["data_offsets"][0]:inf[k]["data_offsets"][1]])
             for k in names] + list(extra)
    for k, dt, shape, b in items:
        if convert:
            dt, b = convert(k, dt, b)
        blob += b"\0" * gap if blob or gap < 0 else b""
        out.append((k, Obj([("dtype", dt), ("shape", shape), ("data_offsets", [len(blob), len(blob) + len(b)])])))
        blob += b
    return meta + out, blob


# ---- running ----------------------------------------------------------------------------

class Hub:
    def __init__(self, r, tmp):
        self.r, self.tmp, self.n = r, tmp, 0
        self.yaml = os.path.join(tmp, "base.yaml")
        open(self.yaml, "w").write(BASE_YAML.format(data=os.path.join(REPO, "data", "tiny")))
        self.loss = {}  # fixture name -> first loss (text) on 1 rank

    def train(self, d, ranks=1, extra=(), limit=60, out=None):
        """(kind, rc, text, output dir) of a 1-step run initialized from d."""
        out = out or os.path.join(self.tmp, "run")
        shutil.rmtree(out, ignore_errors=True)
        args = ["--config", self.yaml, "--set", "model.init_from=" + d, "--set", "output.dir=" + out]
        args += list(extra)
        if ranks == 1:
            kind, rc, text = self.r.run(args, limit=limit, cwd=self.tmp)
        else:
            kind, rc, text = run_pprun(self.r, ranks, args + ["--set", "pipeline.stages=%d" % ranks], limit)
        return kind, rc, text, out

    def run(self, args, limit=60):
        return self.r.run(args, limit=limit, cwd=self.tmp)


def run_pprun(r, ranks, args, limit):
    """r.run of scripts/pprun starting `ranks` ranks of r's binary with args."""
    binary = r.pptrain
    r.pptrain = PPRUN
    try:
        return r.run(["--nproc-per-node", str(ranks), "--grace", "2", binary] + args, limit=limit)
    finally:
        r.pptrain = binary


def first_loss(out):
    try:
        return open(os.path.join(out, "losses.csv")).read().splitlines()[1].split(",")[1]
    except (OSError, IndexError):
        return None


def names_file(text, files):
    line = fuzz.error_line(text)
    return bool(line) and any(f in line for f in files)


def judge(h, area, what, expect, res, files, want=None, tol=0.0):
    """Record a training/sample run's outcome. expect: 'valid', 'invalid', 'same' (either;
    accepted must give want), 'any' (either). res: train()'s (kind, rc, text, out)."""
    kind, rc, text, out = res
    if kind:
        return h.r.record(area, kind, what, text)
    if expect == "run":  # garbage values the file validly holds: a crash is all that counts
        return h.r.record(area, "ok", what)
    if rc == 0:
        got = first_loss(out) if out else None
        if expect == "invalid":
            return h.r.record(area, "wrong", what, "accepted (loss %s, intact %s)\n%s" % (got, want, text[-1500:]))
        if expect in ("valid", "same") and want is not None and out:
            okay = got == want if tol == 0 else (got is not None and abs(float(got) - float(want)) <= tol)
            if not okay:
                return h.r.record(area, "wrong", what, "accepted with loss %s, the intact directory's %s\n%s" % (got, want, text[-1500:]))
        return h.r.record(area, "ok", what)
    if expect == "valid":
        return h.r.record(area, "wrong", what, "a valid directory was refused (rc %s)\n%s" % (rc, text[-2000:]))
    if not names_file(text, files):
        return h.r.record(area, "wrong", what, "refused without an error line naming %s (rc %s)\n%s" % (files, rc, text[-2000:]))
    if out and os.path.exists(out):
        return h.r.record(area, "touched", what, "refused, but output.dir %s was created\n%s" % (out, text[-1500:]))
    return h.r.record(area, "ok", what)


def copy_fixture(h, name, src):
    d = os.path.join(h.tmp, "case", name)
    shutil.rmtree(os.path.join(h.tmp, "case"), ignore_errors=True)
    os.makedirs(os.path.dirname(d))
    shutil.copytree(src, d, symlinks=True)
    return d


# ---- config.json --------------------------------------------------------------------------

def effective(c):
    """The DIM values of a config dict as the model class reads them (defaults applied)."""
    if not isinstance(c, dict):
        return None
    e = {}
    gpt2 = c.get("model_type") == "gpt2"
    if not isinstance(c.get("model_type"), str):
        return None
    for k in sorted(DIM):
        if k in c and c[k] is not None:
            a = {"n_embd": "hidden_size", "n_layer": "num_hidden_layers", "n_head": "num_attention_heads",
                 "n_inner": "intermediate_size"}.get(k, k)
            if a in e and (e[a] != c[k] or type(e[a]) != type(c[k])):
                return None  # two names of one key that disagree
            e[a] = c[k]
    def val(x):  # JSON 32 and 32.0 are not the same to a C reader: keep the type
        return (type(x).__name__, x) if not isinstance(x, bool) else ("bool", x)
    if gpt2:
        e.setdefault("intermediate_size", None)
        if e["intermediate_size"] is None and isinstance(e.get("hidden_size"), int):
            e["intermediate_size"] = 4 * e["hidden_size"]
    else:
        nh = e.get("num_attention_heads")
        kvd = {"llama": nh, "qwen2": 32, "mistral": 8}.get(c.get("model_type") if isinstance(c.get("model_type"), str) else None)
        e.setdefault("num_key_value_heads", kvd)
        if "head_dim" not in e and isinstance(e.get("hidden_size"), int) and isinstance(nh, int) and nh > 0 and not isinstance(nh, bool):
            e["head_dim"] = e["hidden_size"] // nh
    return {k: val(v) for k, v in e.items()}


def classify(orig, new):
    """'invalid', 'any' or 'same' for config dict `new` against the intact `orig`."""
    if not isinstance(new, dict):
        return "invalid"
    if orig.get("model_type") == "gpt2":  # keys GPT2Config does not have, pptrain's one field
        for k in ("intermediate_size", "num_key_value_heads", "head_dim"):
            if orig.get(k, DELETE) != new.get(k, DELETE):
                return "any"
    en, eo = effective(new), effective(orig)
    if en is None:
        return "invalid"
    loose = False  # a change the weights cannot tell: a valid other model (transformers loads it too)
    for k in ("num_hidden_layers", "num_attention_heads", "model_type"):
        a, b = en.get(k), eo.get(k)
        if a == b or a is None or b is None or a[0] != ("str" if k == "model_type" else "int"):
            continue
        if (k == "num_attention_heads" and new.get("model_type") == "gpt2" and a[1] >= 1) or \
                (k == "model_type" and a[1] in ("llama", "qwen2", "mistral") and b[1] in ("llama", "qwen2", "mistral")):
            en[k], loose = b, True  # gpt2's heads: no shape; the llama family (fewer layers: unused weights, refused)
    if en != eo:
        return "invalid"
    if loose:
        return "any"
    keys = set(orig) | set(new)
    changed = {k for k in keys if orig.get(k, DELETE) != new.get(k, DELETE) or type(orig.get(k)) != type(new.get(k))}
    if changed & MODEL:
        return "any"
    return "same"


def config_cases(rng, fixtures):
    cases = []  # (label, fixture, function(config path) -> None, expectation)
    for fx in fixtures:
        orig = json.load(open(os.path.join(HF, fx, "config.json")))
        keys = sorted(orig) + ["hidden_size", "n_embd", "rope_parameters", "head_dim", "num_key_value_heads"]
        for k in sorted(set(keys)):
            vals = HOSTILE if k in DIM or k in MODEL else rng.sample(HOSTILE, 6)
            for v in vals:
                new = dict(orig)
                if v is DELETE:
                    new.pop(k, None)
                else:
                    new[k] = v
                exp = classify(orig, new)
                if new == orig and all(type(new[x]) == type(orig[x]) for x in orig):
                    exp = "valid"
                lab = "%s config.json %s = %s" % (fx, k, "(deleted)" if v is DELETE else json.dumps(v)[:40])
                cases.append((lab, fx, lambda p, new=new: json.dump(new, open(p, "w"), indent=2), exp))
        # rope_scaling's keys (llama)
        if isinstance(orig.get("rope_scaling"), dict):
            for sub in sorted(orig["rope_scaling"]) + ["type"]:
                for v in [DELETE, None, "x", -1, 0, 0.5, 1e308, 2 ** 40, [], "llama3", "yarn", "dynamic"]:
                    new = json.loads(json.dumps(orig))
                    if v is DELETE:
                        new["rope_scaling"].pop(sub, None)
                    else:
                        new["rope_scaling"][sub] = v
                    lab = "%s config.json rope_scaling.%s = %s" % (fx, sub, "(deleted)" if v is DELETE else json.dumps(v))
                    cases.append((lab, fx, lambda p, new=new: json.dump(new, open(p, "w"), indent=2), "any"))
        text = open(os.path.join(HF, fx, "config.json"), "rb").read()
        for cut in sorted({0, 1, 2, len(text) - 1, len(text) - 2, len(text) - 3} | {rng.randrange(len(text)) for _ in range(6)}):
            exp = "valid" if cut >= len(text.rstrip()) else "invalid"
            cases.append(("%s config.json truncated to %d bytes" % (fx, cut), fx,
                          lambda p, cut=cut, text=text: open(p, "wb").write(text[:cut]), exp))
        for j in range(24):  # byte flips: judged by what Python's json makes of the result
            b = bytearray(text)
            for _ in range(rng.choice([1, 1, 2])):
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            try:
                new = json.loads(bytes(b), object_pairs_hook=no_dups)
                exp = classify(orig, new)
                if bytes(b).strip() != text.strip() and new == orig:
                    exp = "same"  # whitespace
            except (ValueError, UnicodeDecodeError):
                exp = "invalid"
            cases.append(("%s config.json flip %d" % (fx, j), fx, lambda p, b=bytes(b): open(p, "wb").write(b), exp))
        # text-level: duplicated keys, the two names of one key, comments, other roots
        hk = "n_embd" if "n_embd" in orig else "hidden_size"
        for lab, t, exp in [
                ("duplicate model_type", text.replace(b"{", b'{"model_type": "%s",' % orig["model_type"].encode(), 1), "invalid"),
                ("duplicate vocab_size", text.replace(b"{", b'{"vocab_size": %d,' % orig["vocab_size"], 1), "invalid"),
                ("both hidden_size and n_embd, equal", text.replace(b"{", b'{"%s": %d,' % (b"hidden_size" if hk == "n_embd" else b"n_embd", orig[hk]), 1), "same"),
                ("both hidden_size and n_embd, unequal", text.replace(b"{", b'{"%s": %d,' % (b"hidden_size" if hk == "n_embd" else b"n_embd", orig[hk] * 2), 1), "invalid"),
                ("a comment", b"// c\n" + text, "invalid"), ("a list root", b"[" + text + b"]", "invalid"),
                ("null root", b"null", "invalid"), ("empty object", b"{}", "invalid"),
                ("UTF-8 BOM", b"\xef\xbb\xbf" + text, "either"), ("UTF-16", text.decode().encode("utf-16"), "invalid"),
                ("NUL inside", text.replace(b"{", b"{\0", 1), "invalid"), ("trailing garbage", text + b"x", "invalid"),
                ("two objects", text + text, "invalid"), ("\\u0000 in model_type", text.replace(b'"model_type": "', b'"model_type": "\\u0000', 1), "invalid"),
                ("invalid UTF-8 in a key", text.replace(b"{", b'{"\xff\xfe": 1,', 1), "invalid"),
                ("deep nesting", text.replace(b"{", b'{"x": ' + b"[" * 100000 + b"]" * 100000 + b",", 1), "either"),
                ("16 MB + 1", text.replace(b"{", b'{"x": "' + b"a" * (16 << 20) + b'",', 1), "either")]:
            cases.append(("%s config.json %s" % (fx, lab), fx, lambda p, t=t: open(p, "wb").write(t),
                          "any" if exp == "either" else exp))
        for lab, mk in special_files():
            cases.append(("%s config.json %s" % (fx, lab), fx, mk, "invalid"))
    return cases


def no_dups(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate key")
    return dict(pairs)


def special_files():
    """(label, function(path)) replacing a file by something that is not one."""
    def repl(p, make):
        if os.path.lexists(p):
            os.remove(p)
        make(p)
    return [("removed", lambda p: os.remove(p)),
            ("empty", lambda p: open(p, "w").close()),
            ("a FIFO", lambda p: repl(p, os.mkfifo)),
            ("a directory", lambda p: repl(p, os.mkdir)),
            ("-> /dev/zero", lambda p: repl(p, lambda q: os.symlink("/dev/zero", q))),
            ("-> /dev/null", lambda p: repl(p, lambda q: os.symlink("/dev/null", q))),
            ("a symlink loop", lambda p: repl(p, lambda q: os.symlink(os.path.basename(q), q))),
            ("dangling symlink", lambda p: repl(p, lambda q: os.symlink(q + ".nowhere", q)))]


# ---- safetensors ------------------------------------------------------------------------

def st_cases(rng, fx, fname="model.safetensors"):
    """(label, function(path of the file), expectation) for the file fname of fixture fx."""
    src = os.path.join(HF, fx, fname)
    pairs, data, N = st_read(src)
    raw = open(src, "rb").read()
    inf = info(pairs)
    names = [k for k, _ in pairs if k != "__metadata__"]
    big = max(names, key=lambda k: inf[k]["data_offsets"][1] - inf[k]["data_offsets"][0])
    mat = [k for k in names if len(inf[k]["shape"]) == 2]
    c = []

    def add(lab, fn, exp):
        if exp == "invalid" and (".attn.bias" in lab or ".attn.masked_bias" in lab):
            exp = "any"  # the Hub GPT-2's mask buffers: never read (transformers ignores them)
        c.append(("%s %s %s" % (fx, fname, lab), fn, exp))

    def with_entry(name, **kw):  # a header with tensor `name`'s fields replaced
        def fn(p):
            ps = [(k, Obj((f, kw.get(f, x)) for f, x in v if kw.get(f, x) is not DELETE) if k == name else v) for k, v in pairs]
            st_write(p, ps, data)
        return fn

    for n in [0, 1, 2, 7, 8, 9, N - 8, N - 7, N - 3, N - 2, N - 1, N + 1, N + 2, N + 7, N + 8, N + 64,
              len(raw) - 8, len(raw) - 7, len(raw), 2 ** 31, 2 ** 32 + N, 2 ** 63, 2 ** 64 - 1, 100000001, 100000000]:
        add("header length %d (intact %d)" % (n, N), lambda p, n=n: open(p, "wb").write(struct.pack("<Q", n) + raw[8:]), "invalid")
    for k in range(8):  # the length field's low byte flipped, bit by bit
        add("header length bit %d flipped" % k, lambda p, k=k: open(p, "wb").write(struct.pack("<Q", N ^ (1 << k)) + raw[8:]), "invalid")
    for cut in sorted({0, 1, 4, 7, 8, 9, 8 + N // 2, 8 + N - 1, 8 + N, 8 + N + 1, len(raw) - 1, len(raw) - 4} |
                      {rng.randrange(8 + N, len(raw)) for _ in range(4)}):
        add("truncated to %d of %d bytes" % (cut, len(raw)), lambda p, cut=cut: open(p, "wb").write(raw[:cut]), "invalid")
    for extra in [b"\0", b"\0" * 4, b" " * 8]:
        add("%d bytes appended" % len(extra), lambda p, e=extra: open(p, "ab").write(e), "invalid")
    text = st_text(pairs)
    for lab, t, exp in [("header []", "[]", "invalid"), ("header \"x\"", '"x"', "invalid"), ("header null", "null", "invalid"),
                        ("header {} (no tensors)", "{}", "invalid"), ("header cut in half", text[:len(text) // 2], "invalid"),
                        ("header with a comment", "/*x*/" + text, "invalid"),
                        ("header with NaN", text.replace('"shape":[', '"shape":[NaN,', 1), "invalid"),
                        ("header with leading spaces", "  " + text.rstrip(), "any"),
                        ("header with a newline before }", text.rstrip()[:-1] + "\n}", "same"),
                        ("header of 16 MB spaces", text + " " * (16 << 20), "same")]:
        add(lab, lambda p, t=t: st_write(p, t, data), exp)
    dup = '{"%s":%s,' % (big, json.dumps(inf[big], separators=(",", ":")))
    add("a tensor entry given twice", lambda p: st_write(p, dup + text[1:], data), "invalid")
    add("__metadata__ given twice", lambda p: st_write(p, '{"__metadata__":{},' + text[1:], data), "invalid")
    for m in [None, [], "pt", 1, {"format": 1}, {"format": None}, {"format": {"a": "b"}}, {"format": "tf"}, {"x": "y" * 1000},
              {"format": "pt", "a": "b"}, {"": ""}]:
        exp = "same" if isinstance(m, dict) and all(isinstance(v, str) for v in m.values()) else ("any" if m is None else "invalid")
        add("__metadata__ %s" % json.dumps(m)[:40],
            lambda p, m=m: st_write(p, [("__metadata__", m)] + [(k, v) for k, v in pairs if k != "__metadata__"], data), exp)
    add("no __metadata__", lambda p: st_write(p, [(k, v) for k, v in pairs if k != "__metadata__"], data), "same")
    # one tensor's entry: dtype, shape, data_offsets
    for t in rng.sample(names, min(4, len(names))) + [big]:
        b, e = inf[t]["data_offsets"]
        shp = inf[t]["shape"]
        for dt in ["F33", "f32", "", 5, None, "F64", "I64", "I32", "BOOL", "U8", "F8_E4M3", "C64", "F4", "F6_E2M3"]:
            add("%s dtype %s" % (t, json.dumps(dt)), with_entry(t, dtype=dt), "invalid")
        if inf[t]["dtype"] == "F32":
            add("%s dtype F16 (offsets as F32's)" % t, with_entry(t, dtype="F16"), "invalid")
            # a valid file (a gap after it) whose values are garbage: judged only for crashes
            add("%s dtype F16, half the bytes" % t, with_entry(t, dtype="F16", data_offsets=[b, b + (e - b) // 2]),
                "run" if e != len(data) else "invalid")
        for s in [[], [0], [-1], shp[::-1] if len(shp) == 2 and shp[0] != shp[1] else shp + [1], shp + [1], [1] + shp, [1, 1, 1, 1] + shp,
                  [1] * 8 + shp, [2 ** 62, 4], [2 ** 32, 2 ** 32], [2 ** 63 - 1], [-(2 ** 63)], ["4"], [4.0], None, "x", [[4]], [True]]:
            if s == shp:
                continue
            add("%s shape %s" % (t, json.dumps(s)[:40]), with_entry(t, shape=s), "invalid")
        for off in [[e, b], [b, e + 4], [b - 4, e - 4] if b >= 4 else [b + 4, e + 4], [b + 4, e + 4], [b, b], [0, e - b] if b else [4, e - b + 4],
                    [b, e, 0], [b], [], None, "x", [-4, e - b - 4], [b, 2 ** 64], [2 ** 63, 2 ** 63 + e - b], [2 ** 64 - 4, 2 ** 64 + e - b - 4],
                    [b + 0.0, e], [str(b), e], [len(data), len(data) + e - b], [len(data) - (e - b) + 1, len(data) + 1]]:
            add("%s data_offsets %s" % (t, json.dumps(off)[:48]), with_entry(t, data_offsets=off), "invalid")
        for f in ["dtype", "shape", "data_offsets"]:
            add("%s without %s" % (t, f), with_entry(t, **{f: DELETE}), "invalid")
        add("%s with an unknown field" % t, lambda p, t=t: st_write(p, [(k, Obj(v + [("x", 1)]) if k == t else v) for k, v in pairs], data), "any")
        add("%s entry null" % t, lambda p, t=t: st_write(p, [(k, None if k == t else v) for k, v in pairs], data), "invalid")
        add("%s entry a list" % t, lambda p, t=t: st_write(p, [(k, [1, 2] if k == t else v) for k, v in pairs], data), "invalid")
        add("%s removed" % t, lambda p, t=t: st_write(p, [(k, v) for k, v in pairs if k != t], data), "invalid")
        add("%s renamed (a NUL escaped in its name)" % t, lambda p, t=t: st_write(p, text.replace('"%s"' % t, '"%s\\u0000"' % t, 1), data), "invalid")
        add("%s renamed (invalid UTF-8)" % t, lambda p, t=t: st_write(p, text.encode().replace(b'"%s"' % t.encode(), b'"%s\xff"' % t.encode(), 1), data), "invalid")
        add("%s renamed (64 KB long)" % t, lambda p, t=t: st_write(p, text.replace('"%s"' % t, '"%s"' % (t + "x" * 65536), 1), data), "invalid")
    # two tensors' offsets swapped (same size): the file says so, a different model ("any");
    # another tensor's bytes given to a second name: overlap
    same = [(a, b) for a in mat for b in mat if a < b and inf[a]["shape"] == inf[b]["shape"]]
    for a, b in same[:2]:
        add("%s and %s's offsets swapped" % (a, b), lambda p, a=a, b=b: st_write(p, [(k, Obj((f, inf[b if k == a else a][f]) if f == "data_offsets" else (f, x) for f, x in v) if k in (a, b) else v) for k, v in pairs], data), "any")
        add("%s's bytes also under %s" % (a, b), lambda p, a=a, b=b: st_write(p, [(k, Obj((f, inf[a][f]) if f == "data_offsets" else (f, x) for f, x in v) if k == b else v) for k, v in pairs], data), "invalid")
    # extra tensors: weights the model does not use, refused naming the file
    for lab, ex in [("an extra tensor", [("extra.weight", "F32", [2, 2], b"\0" * 16)]),
                    ("an extra I64 tensor", [("extra.ids", "I64", [3], b"\1" * 24)]),
                    ("an extra empty tensor", [("extra.empty", "F32", [0, 5], b"")]),
                    ("an extra scalar", [("extra.scalar", "F32", [], b"\0\0\x80\x3f")]),
                    ("an extra tensor with a 4 KB name", [("x" * 4096, "F32", [1], b"\0" * 4)]),
                    ("an extra tensor named with U+202E", [("\u202eweight", "F32", [1], b"\0" * 4)])]:
        add(lab, lambda p, ex=ex: st_write(p, *repack(pairs, data, extra=ex)), "invalid")
    add("the tensors in reverse order of their bytes", lambda p: st_write(p, *repack(pairs, data, order=names[::-1])), "same")
    add("the tensors in random order", lambda p: st_write(p, *repack(pairs, data, order=rng.sample(names, len(names)))), "same")
    add("every tensor as F16", lambda p: st_write(p, *repack(pairs, data, convert=lambda k, dt, b: ("F16", f32_to_f16(b)) if dt == "F32" else (dt, b))), "f16")
    add("every tensor as BF16", lambda p: st_write(p, *repack(pairs, data, convert=lambda k, dt, b: ("BF16", f32_to_bf16(b)) if dt == "F32" else (dt, b))), "f16")
    add("random bytes", lambda p: open(p, "wb").write(bytes(rng.randrange(256) for _ in range(len(raw)))), "invalid")
    add("a GGUF file's magic", lambda p: open(p, "wb").write(b"GGUF" + raw[4:]), "invalid")
    add("a torch zip", lambda p: open(p, "wb").write(b"PK\x03\x04" + raw[4:]), "invalid")
    for lab, mk in special_files():
        add(lab, mk, "invalid")
    for j in range(40):  # header byte flips, judged by whether the header still parses the same
        b = bytearray(raw)
        o = 8 + rng.randrange(N)
        b[o] ^= 1 << rng.randrange(8)
        try:
            newp = json.loads(bytes(b[8:8 + N]), object_pairs_hook=list)
            exp = "same" if newp == pairs else "any"
        except (ValueError, UnicodeDecodeError):
            exp = "invalid"
        add("header byte %d flipped" % o, lambda p, b=bytes(b): open(p, "wb").write(b), exp)
    return c


# ---- sharded directories ------------------------------------------------------------------

def index_cases(rng, fxdir, label):
    """(label, function(dir), expectation) damaging the sharded directory `fxdir`."""
    idx = json.load(open(os.path.join(fxdir, "model.safetensors.index.json")))
    wm = idx["weight_map"]
    shards = sorted(set(wm.values()))
    t0 = sorted(wm)[len(wm) // 2]
    c = []
    I = "model.safetensors.index.json"

    def add(lab, fn, exp, files=(I,)):
        c.append(("%s %s" % (label, lab), fn, exp, files))

    def put(d, obj):
        with open(os.path.join(d, I), "w") as f:
            if isinstance(obj, (bytes, str)):
                f.write(obj if isinstance(obj, str) else obj.decode("latin-1"))
            else:
                json.dump(obj, f, indent=2)

    def mapped(**kw):
        return dict(idx, weight_map=dict(wm, **kw))

    other = [s for s in shards if s != wm[t0]][0]
    for lab, obj, exp in [
            ("weight_map missing", {"metadata": idx.get("metadata")}, "invalid"),
            ("weight_map null", dict(idx, weight_map=None), "invalid"),
            ("weight_map a list", dict(idx, weight_map=list(wm.items())), "invalid"),
            ("weight_map a string", dict(idx, weight_map="x"), "invalid"),
            ("weight_map empty", dict(idx, weight_map={}), "invalid"),
            ("metadata a list", dict(idx, metadata=[1]), "invalid"),
            ("metadata null", dict(idx, metadata=None), "same"),
            ("metadata absent", {"weight_map": wm}, "same"),
            ("total_size wrong", dict(idx, metadata={"total_size": 1}), "same"),
            ("an unknown key", dict(idx, x=[1, 2]), "same"),
            ("%s removed from the map" % t0, dict(idx, weight_map={k: v for k, v in wm.items() if k != t0}), "invalid"),
            ("%s in the wrong shard" % t0, mapped(**{t0: other}), "invalid"),
            ("%s in a missing shard" % t0, mapped(**{t0: "model-00009-of-00009.safetensors"}), "invalid"),
            ("%s in ../outside.safetensors" % t0, mapped(**{t0: "../outside.safetensors"}), "invalid"),
            ("%s in an absolute path" % t0, mapped(**{t0: "OUTSIDE"}), "invalid"),
            ("%s in ./%s" % (t0, wm[t0]), mapped(**{t0: "./" + wm[t0]}), "invalid"),
            ("%s in sub/%s" % (t0, wm[t0]), mapped(**{t0: "sub/" + wm[t0]}), "invalid"),
            ("%s in \"\"" % t0, mapped(**{t0: ""}), "invalid"),
            ("%s in \".\"" % t0, mapped(**{t0: "."}), "invalid"),
            ("%s in \"..\"" % t0, mapped(**{t0: ".."}), "invalid"),
            ("%s in config.json" % t0, mapped(**{t0: "config.json"}), "invalid"),
            ("%s in the index itself" % t0, mapped(**{t0: I}), "invalid"),
            ("%s in null" % t0, mapped(**{t0: None}), "invalid"),
            ("%s in 5" % t0, mapped(**{t0: 5}), "invalid"),
            ("%s in [shard]" % t0, mapped(**{t0: [wm[t0]]}), "invalid"),
            ("an extra name in the map, in a shard without it", mapped(**{"extra.weight": other}), "invalid"),
            ("a name 64 KB long in the map", mapped(**{"x" * 65536: other}), "invalid"),
            ("a shard name 64 KB long", mapped(**{t0: "x" * 65536 + ".safetensors"}), "invalid"),
            ("every tensor in one shard", dict(idx, weight_map={k: shards[0] for k in wm}), "invalid")]:
        add(lab, lambda d, obj=obj: put(d, json.loads(json.dumps(obj).replace('"OUTSIDE"', json.dumps(os.path.join(os.path.dirname(d), "outside.safetensors"))))), exp)
    text = open(os.path.join(fxdir, I)).read()
    add("%s listed twice (duplicate key)" % t0, lambda d: put(d, text.replace('"weight_map": {', '"weight_map": {\n    "%s": "%s",' % (t0, wm[t0]), 1)), "invalid")
    for cut in [0, 1, len(text) // 2, len(text) - 2]:
        add("index truncated to %d bytes" % cut, lambda d, cut=cut: put(d, text[:cut]), "invalid")
    add("index not JSON", lambda d: put(d, "weight_map = {}"), "invalid")
    for lab, mk in special_files():
        add("index " + lab, lambda d, mk=mk: mk(os.path.join(d, I)), "invalid", (I, ""))
    for s in shards[:2]:
        for lab, mk in special_files():
            add("%s %s" % (s, lab), lambda d, s=s, mk=mk: mk(os.path.join(d, s)), "invalid", (s,))
        add("%s -> a shard outside the directory" % s,
            lambda d, s=s: (shutil.copy(os.path.join(d, s), os.path.join(os.path.dirname(d), "outside.safetensors")), os.remove(os.path.join(d, s)),
                            os.symlink(os.path.join(os.path.dirname(d), "outside.safetensors"), os.path.join(d, s))), "same", (s,))
        add("%s truncated by 4 bytes" % s, lambda d, s=s: os.truncate(os.path.join(d, s), os.path.getsize(os.path.join(d, s)) - 4), "invalid", (s,))
        add("%s truncated to 8 bytes" % s, lambda d, s=s: os.truncate(os.path.join(d, s), 8), "invalid", (s,))
    # ../outside.safetensors exists (a copy of the shard): still refused, never read
    add("%s in ../outside.safetensors, which exists" % t0,
        lambda d: (shutil.copy(os.path.join(d, wm[t0]), os.path.join(os.path.dirname(d), "outside.safetensors")),
                   put(d, mapped(**{t0: "../outside.safetensors"}))), "invalid")
    # the shards renamed consistently: fine
    add("shards renamed, the index following", lambda d: [os.rename(os.path.join(d, s), os.path.join(d, "w%d.safetensors" % i)) for i, s in enumerate(shards)] and
        put(d, dict(idx, weight_map={k: "w%d.safetensors" % shards.index(v) for k, v in wm.items()})), "same")
    # a model.safetensors beside the index wins (transformers looks for it first)
    add("an empty model.safetensors beside the index", lambda d: open(os.path.join(d, "model.safetensors"), "wb").close(), "invalid", ("model.safetensors",))
    # a tensor present in two shards, the index naming one: the other copy is a tensor the
    # index does not describe (transformers loads every key of a shard): refused
    add("%s also in another shard (zeros), the index naming the right one" % t0,
        lambda d: dup_into(d, wm, t0, other), "invalid", (other,))
    return c


def dup_into(d, wm, name, shard):
    """Add a zeroed copy of tensor `name` (from its shard) to the file `shard`."""
    p = os.path.join(d, shard)
    src = st_tensors(os.path.join(d, wm[name]))[name]
    pairs, data, _ = st_read(p)
    st_write(p, *repack(pairs, data, extra=[(name, src[0], src[1], b"\0" * len(src[2]))]))


# ---- the campaign -------------------------------------------------------------------------

def fuzz_hub(r, n, rng):
    tmp = tempfile.mkdtemp(prefix="fuzzhub.", dir=r.out)
    h = Hub(r, tmp)
    fixtures = ["gpt2", "gpt2_hub", "llama3", "llama_mqa", "qwen2", "mistral"]
    for fx in fixtures:  # the intact directories' losses: the reference of every case
        kind, rc, text, out = h.train(os.path.join(HF, fx))
        assert kind is None and rc == 0, text
        h.loss[fx] = first_loss(out)
    # a sharded llama3 (export --max-shard-size 8KB of a 0-step import)
    kind, rc, text, out = h.train(os.path.join(HF, "llama3"), extra=["--set", "train.steps=0"], out=os.path.join(tmp, "zero"))
    assert rc == 0, text
    sharded = os.path.join(tmp, "llama3_sharded")
    kind, rc, text = h.run(["export", "--checkpoint", os.path.join(out, "checkpoints", "latest"), "--format", "hf",
                            "--out", sharded, "--max-shard-size", "8KB"])
    assert rc == 0 and os.path.exists(os.path.join(sharded, "model.safetensors.index.json")), text
    kind, rc, text, out = h.train(sharded)
    assert rc == 0 and first_loss(out) == h.loss["llama3"], (text, first_loss(out), h.loss["llama3"])
    h.loss[sharded] = h.loss["llama3"]

    plan = []  # (area, label, function() -> None, expectation, ...)
    for lab, fx, mk, exp in config_cases(rng, ["gpt2", "llama3", "qwen2", "mistral", "llama_mqa"]):
        plan.append(("hub-config", lab, fx, "config.json", mk, exp, None))
    for fx in ["gpt2", "llama3"]:
        for lab, mk, exp in st_cases(rng, fx):
            plan.append(("hub-st", lab, fx, "model.safetensors", mk, exp, None))
    for lab, mk, exp in st_cases(rng, "gpt2_hub", "model-00002-of-00002.safetensors")[::3]:
        plan.append(("hub-st", lab, "gpt2_hub", "model-00002-of-00002.safetensors", mk, exp, None))
    for src, lab0 in [(sharded, "sharded llama3"), (os.path.join(HF, "gpt2_hub"), "gpt2_hub")]:
        for lab, mk, exp, files in index_cases(rng, src, lab0):
            plan.append(("hub-index", lab, src, None, mk, exp, files))
    # n cases at most: every index case, then safetensors and config.json cases half and
    # half (a seeded sample of each), run in plan order
    by = {a: [i for i, p in enumerate(plan) if p[0] == a] for a in ("hub-index", "hub-st", "hub-config")}
    keep = by["hub-index"][:n]
    room = max(n - len(keep), 0)
    st = rng.sample(by["hub-st"], min(len(by["hub-st"]), room // 2))
    keep += st + rng.sample(by["hub-config"], min(len(by["hub-config"]), room - len(st)))
    keep = set(keep)
    plan = [p for i, p in enumerate(plan) if i in keep]
    counts = {}
    for k, (area, lab, fx, fname, mk, exp, files) in enumerate(plan):
        src = fx if os.path.isabs(fx) else os.path.join(HF, fx)
        d = copy_fixture(h, os.path.basename(src), src)
        try:
            mk(os.path.join(d, fname) if fname else d)
        except OSError as e:
            r.record(area, "ok", lab + " (not made: %s)" % e)
            continue
        want = h.loss.get(fx)
        if area == "hub-config":
            named = [d]  # config.json, or the weights file that disagrees with it
        else:
            named = [os.path.join(d, f) if f else d for f in (files or [fname])]
            if lab.endswith(".safetensors removed"):
                named.append(d)  # "D has neither model.safetensors nor ..."
        # two ranks for one case in four: the import's per-rank reads
        ranks = 2 if k % 4 == 3 else 1
        res = h.train(d, ranks=ranks)
        e = {"f16": "valid", "either": "any"}.get(exp, exp)
        judge(h, area, lab + (" (2 ranks)" if ranks == 2 else ""), e, res, named, want,
              tol=0.02 if exp == "f16" else 0.0)
        counts[exp] = counts.get(exp, 0) + 1
    extra = {"cases": len(plan), "expectations": counts}
    extra.update(layout_roundtrip(h, rng))
    extra.update(sample_cases(h, rng))
    extra.update(export_cases(h, rng))
    shutil.rmtree(tmp, ignore_errors=True)
    return extra


def layout_roundtrip(h, rng):
    """Valid layouts read the same values: import at 0 steps (1 and 2 ranks), export at fp32,
    every tensor's bytes equal to the input's."""
    n = 0
    for fx in ["gpt2", "llama3"]:
        src = os.path.join(HF, fx)
        pairs, data, _ = st_read(os.path.join(src, "model.safetensors"))
        names = [k for k, _ in pairs if k != "__metadata__"]
        want = st_tensors(os.path.join(src, "model.safetensors"))
        # a buffer the model class skips (transformers' _keys_to_ignore_on_load_unexpected)
        buf = "transformer.h.%d.attn.bias" if fx == "gpt2" else "model.layers.%d.self_attn.rotary_emb.inv_freq"
        variants = [("reversed", lambda p: st_write(p, *repack(pairs, data, order=names[::-1]))),
                    ("shuffled", lambda p: st_write(p, *repack(pairs, data, order=rng.sample(names, len(names))))),
                    ("buffers between", lambda p: st_write(p, *repack(pairs, data, extra=[(buf % i, "F32", [3], b"\x01" * 12) for i in range(3)]))),
                    ("header padded with a newline", lambda p: st_write(p, st_text(pairs).rstrip() + "\n" + " " * 7, data)),
                    ("one shard per tensor", lambda p: one_per_shard(p, pairs, data))]
        for lab, mk in variants:
            for ranks in (1, 2):
                d = copy_fixture(h, fx, src)
                mk(os.path.join(d, "model.safetensors"))
                what = "%s %s: import (%d rank%s) and export give the same tensors" % (fx, lab, ranks, "s" * (ranks > 1))
                kind, rc, text, out = h.train(d, ranks=ranks, extra=["--set", "train.steps=0"])
                n += 1
                if kind or rc != 0:
                    h.r.record("hub-layout", kind or "wrong", what, text[-2000:])
                    continue
                x = os.path.join(h.tmp, "x")
                shutil.rmtree(x, ignore_errors=True)
                kind, rc, text = h.run(["export", "--checkpoint", os.path.join(out, "checkpoints", "latest"), "--format", "hf", "--out", x])
                if kind or rc != 0:
                    h.r.record("hub-layout", kind or "wrong", what + " (export)", text[-2000:])
                    continue
                got = dir_tensors(x)
                bad = [k for k in want if k not in got or got[k] != want[k]]
                h.r.record("hub-layout", "wrong" if bad else "ok", what, "tensors differ: %s" % bad[:5])
    return {"layouts": n}


def one_per_shard(p, pairs, data):
    d = os.path.dirname(p)
    os.remove(p)
    inf = info(pairs)
    names = [k for k, _ in pairs if k != "__metadata__"]
    wm = {}
    for i, k in enumerate(names):
        s = "part-%d.safetensors" % i
        b, e = inf[k]["data_offsets"]
        st_write(os.path.join(d, s), [(k, Obj([("dtype", inf[k]["dtype"]), ("shape", inf[k]["shape"]), ("data_offsets", [0, e - b])]))], data[b:e])
        wm[k] = s
    json.dump({"metadata": {"total_size": len(data)}, "weight_map": wm}, open(os.path.join(d, "model.safetensors.index.json"), "w"))


def sample_cases(h, rng):
    """pptrain sample --init-from on damaged directories, generation_config.json included."""
    n = 0
    base = ["--prompt-ids", "1,2", "--max-new-tokens", "2", "--ids", "--threads", "1"]
    src = os.path.join(HF, "llama3")
    cases = [("intact", lambda d: None, "valid", "config.json")]
    for lab, mk in special_files():  # transformers reads an unreadable one as none
        cases.append(("generation_config.json " + lab, lambda d, mk=mk: mk(os.path.join(d, "generation_config.json")),
                      "valid" if lab == "removed" else "any", "generation_config.json"))
        cases.append(("config.json " + lab, lambda d, mk=mk: mk(os.path.join(d, "config.json")), "invalid", "config.json"))
        cases.append(("model.safetensors " + lab, lambda d, mk=mk: mk(os.path.join(d, "model.safetensors")), "invalid", "model.safetensors"))
    for v in [None, -1, 2 ** 40, -2 ** 63, 2 ** 63 - 1, [], [1] * 17, [None], "2", 255, 256, [255, 256, -5], 1.5, True, {}]:
        cases.append(("generation_config.json eos_token_id %s" % json.dumps(v)[:30],
                      lambda d, v=v: json.dump({"eos_token_id": v, "bos_token_id": 1}, open(os.path.join(d, "generation_config.json"), "w")),
                      "any", "generation_config.json"))
        cases.append(("config.json eos_token_id %s" % json.dumps(v)[:30],
                      lambda d, v=v: (os.remove(os.path.join(d, "generation_config.json")), patch_json(os.path.join(d, "config.json"), eos_token_id=v)),
                      "any", "config.json"))
    for lab, t in [("truncated", b'{"eos_token_id": '), ("a list root", b"[1]"), ("NUL", b'{"eos_token_id": 1\0}'), ("duplicate key", b'{"eos_token_id": 1, "eos_token_id": 2}')]:
        cases.append(("generation_config.json " + lab, lambda d, t=t: open(os.path.join(d, "generation_config.json"), "wb").write(t), "invalid", "generation_config.json"))
    header = st_read(os.path.join(src, "model.safetensors"))
    for lab, n_ in [("header length - 1", header[2] - 1), ("header length + 1", header[2] + 1)]:
        cases.append(("model.safetensors " + lab, lambda d, n_=n_: patch_len(os.path.join(d, "model.safetensors"), n_), "invalid", "model.safetensors"))
    for lab, mk, exp, f in cases:
        d = copy_fixture(h, "llama3", src)
        mk(d)
        kind, rc, text = h.run(["sample", "--init-from", d] + base)
        n += 1
        what = "sample --init-from llama3, " + lab
        if kind:
            h.r.record("hub-sample", kind, what, text)
        elif exp == "valid" and rc != 0:
            h.r.record("hub-sample", "wrong", what, "refused\n" + text[-1500:])
        elif exp == "invalid" and rc == 0:
            h.r.record("hub-sample", "wrong", what, "accepted\n" + text[-1500:])
        elif rc != 0 and not names_file(text, [os.path.join(d, f), d]):
            h.r.record("hub-sample", "wrong", what, "refused without naming %s\n%s" % (f, text[-1500:]))
        else:
            h.r.record("hub-sample", "ok", what)
    return {"sample": n}


def patch_json(p, **kw):
    c = json.load(open(p))
    c.update(kw)
    json.dump(c, open(p, "w"))


def patch_len(p, n):
    with open(p, "r+b") as f:
        f.write(struct.pack("<Q", n))


def export_cases(h, rng):
    """export --format hf: refusals leave what is there as it was; a killed export leaves
    its --out absent or complete."""
    n = 0
    ck = os.path.join(h.tmp, "zero", "checkpoints", "latest")  # llama3 at 0 steps
    good = os.path.join(h.tmp, "xgood")
    kind, rc, text = h.run(["export", "--checkpoint", ck, "--format", "hf", "--out", good])
    assert rc == 0, text
    ref = {f: open(os.path.join(good, f), "rb").read() for f in os.listdir(good)}
    exp_dir = os.path.join(h.tmp, "exp")

    def fresh():
        shutil.rmtree(exp_dir, ignore_errors=True)
        os.makedirs(exp_dir)
        return exp_dir

    def export(out, *flags, limit=60):
        return h.run(["export", "--checkpoint", ck, "--format", "hf", "--out", out] + list(flags), limit=limit)

    cases = []
    # (label, setup(dir) -> out path, flags, expectation)
    cases.append(("into an earlier export", lambda e: (shutil.copytree(good, os.path.join(e, "m")), os.path.join(e, "m"))[1], [], "invalid"))
    cases.append(("into a directory holding one file", lambda e: (os.makedirs(os.path.join(e, "m")), open(os.path.join(e, "m", "keep"), "w").write("x"), os.path.join(e, "m"))[2], [], "invalid"))
    cases.append(("onto a file", lambda e: (open(os.path.join(e, "m"), "w").write("keep"), os.path.join(e, "m"))[1], [], "invalid"))
    cases.append(("under a file", lambda e: (open(os.path.join(e, "f"), "w").write("keep"), os.path.join(e, "f", "m"))[1], [], "invalid"))
    cases.append(("onto a FIFO", lambda e: (os.mkfifo(os.path.join(e, "m")), os.path.join(e, "m"))[1], [], "invalid"))
    cases.append(("onto a dangling symlink", lambda e: (os.symlink(os.path.join(e, "nowhere"), os.path.join(e, "m")), os.path.join(e, "m"))[1], [], "invalid"))
    cases.append(("under /proc (read-only)", lambda e: "/proc/pptrain-fuzz-hub/m", [], "invalid"))
    cases.append(("into an empty directory", lambda e: (os.makedirs(os.path.join(e, "m")), os.path.join(e, "m"))[1], [], "valid"))
    cases.append(("a missing parent", lambda e: os.path.join(e, "a", "b", "m"), [], "valid"))
    cases.append(("a trailing slash", lambda e: os.path.join(e, "m") + "/", [], "valid"))
    for s in ["0", "-1", "1", "1B", "1.5KB", "8KB", "1e30", "1e-3KB", "abc", "5GB ", " 5GB", "nan", "inf", "0x10", "18446744073709551616",
              "18446744073709551615", "9999999999999999999999TB", "1KiB", "1kib", "100000", ""]:
        cases.append(("--max-shard-size %r" % s, lambda e: os.path.join(e, "m"), ["--max-shard-size", s], "any"))
    for dt in ["fp16", "", "BF16", "bf16", "fp32", "f32", "x" * 1000]:
        cases.append(("--dtype %r" % dt, lambda e: os.path.join(e, "m"), ["--dtype", dt], "any"))
    for lab, setup, flags, exp in cases:
        e = fresh()
        out = setup(e)
        before = fuzz.tree_sum(e)
        kind, rc, text = export(out, *flags)
        n += 1
        what = "export --format hf " + lab
        if kind:
            h.r.record("hub-export", kind, what, text)
        elif rc == 0 and exp == "invalid":
            h.r.record("hub-export", "wrong", what, "accepted\n" + text[-1500:])
        elif rc != 0 and exp == "valid":
            h.r.record("hub-export", "wrong", what, "refused\n" + text[-1500:])
        elif rc != 0 and fuzz.tree_sum(e) != before:
            h.r.record("hub-export", "touched", what, "refused, but %s changed: %s\n%s" % (e, sorted(os.listdir(e)), text[-1500:]))
        elif rc != 0 and not fuzz.error_line(text):
            h.r.record("hub-export", "wrong", what, "refused without an error line\n" + text[-1500:])
        elif rc == 0 and not roundtrips(h, out.rstrip("/"), flags):
            h.r.record("hub-export", "wrong", what, "the export does not import to the intact loss\n" + text[-1500:])
        else:
            h.r.record("hub-export", "ok", what)
    # killed at random moments (an export takes some 20 ms; cut into 2 KB shards, more):
    # --out absent, or complete and equal to the uninterrupted one
    refs = {(): ref}
    kind, rc, text = export(os.path.join(h.tmp, "xsmall"), "--max-shard-size", "2KB")
    assert rc == 0, text
    refs[("--max-shard-size", "2KB")] = {f: open(os.path.join(h.tmp, "xsmall", f), "rb").read()
                                         for f in os.listdir(os.path.join(h.tmp, "xsmall"))}
    for j in range(24):
        e = fresh()
        out = os.path.join(e, "m")
        flags = () if j % 2 else ("--max-shard-size", "2KB")
        t = rng.uniform(0.002, 0.06)
        kind, rc, text = export(out, *flags, limit=t)
        ref = refs[flags]
        n += 1
        what = "export --format hf %skilled after %.3f s" % (" ".join(flags) + " " if flags else "", t)
        if kind == "crash":
            h.r.record("hub-export", kind, what, text)
            continue
        if not os.path.exists(out):
            h.r.record("hub-export", "ok", what)
            continue
        got = {f: open(os.path.join(out, f), "rb").read() for f in os.listdir(out)} if os.path.isdir(out) else None
        h.r.record("hub-export", "ok" if got == ref else "wrong", what,
                   "a killed export left %s: %s" % (out, sorted(got) if got else "not a directory"))
    return {"export": n}


def roundtrips(h, out, flags):
    if "--dtype" in flags and flags[flags.index("--dtype") + 1] == "bf16":
        return True  # rounded: hf.sh checks its loss
    kind, rc, text, o = h.train(out)
    return kind is None and rc == 0 and first_loss(o) == h.loss["llama3"]


if __name__ == "__main__":  # a quick driver: fuzz_hub.py PPTRAIN OUT [N]
    import sys
    os.makedirs(sys.argv[2], exist_ok=True)
    r = fuzz.Runner(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), 60)
    details = fuzz_hub(r, int(sys.argv[3]) if len(sys.argv) > 3 else 100000, random.Random("hub-17"))
    table = {}
    for (area, kind), c in sorted(r.counts.items()):
        table.setdefault(area, {})[kind] = c
    print(json.dumps({"counts": table, "details": details, "crash_sites": r.sites}, indent=1))
