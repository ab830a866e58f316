"""fuzz_tok.py — hostile tokenizer.json files and prepare-data inputs (area `tok`).

Two parts, both through `pptrain prepare-data` (the one command that loads a tokenizer and
encodes with it):
  tok       tokenizer.json files: the six goldens of test/tok, truncated, bytes flipped,
            every field given the wrong JSON type / null / nothing; vocabularies with bad,
            huge, sparse or duplicated ids; bad merges; byte-level vocabularies missing byte
            tokens; invalid Unicode and NUL in token strings; deep nesting, long strings,
            big vocabularies; regexes PCRE2 refuses, backtracking ones, empty ones; nested or
            empty Sequences; unknown component types; paths that are no regular file.
  tok-prep  prepare-data's inputs and options: text and JSONL that is invalid UTF-8, NUL,
            CRLF, BOM, blank, long (a 100 MB line: memory must stay bounded), records
            without the field or of the wrong type; every numeric option at its edges;
            outputs in impossible places, or over good files that must survive a refusal;
            and the goldens' own texts, whose ids must stay those of test/tok/cases.json.
Each case knows whether its input is valid, or asks the tokenizers library (when it is
installed) as the oracle: a file both load must give the library's ids, bit for bit; a
file the library refuses must be refused; pptrain may refuse more (what it does not
support) as long as it says so with an "error:" line naming the file. Memory: the
peak RSS of prepare-data on the large inputs (its VmHWM, watched), against a bound proportional to
the input. Entry point: fuzz_tok(r, n, rng) with fuzz.py's Runner."""
import copy
import json
import os
import shutil
import struct
import tempfile
import threading
import time

from fuzz import tree_sum

os.environ["RUST_BACKTRACE"] = "0"  # the library's panics (the oracle's) print one line

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TOKDIR = os.path.join(REPO, "test", "tok")
KINDS = ["gpt2", "llama2", "llama3", "mistral", "qwen2", "sp"]

try:  # the oracle; optional (the campaign runs without it, with fewer checks)
    import tokenizers
except Exception:  # pragma: no cover
    tokenizers = None


def golden(kind):
    with open(os.path.join(TOKDIR, kind + ".json"), "rb") as f:
        return f.read()


def cases_json():
    with open(os.path.join(TOKDIR, "cases.json")) as f:
        return json.load(f)


def read_bin(path):
    """(width, ids) of an llm.c token file, or None when it is not one."""
    with open(path, "rb") as f:
        b = f.read()
    if len(b) < 1024:
        return None
    magic, version, n = struct.unpack_from("<3i", b)
    w = {20240520: 2, 20240801: 4}.get(magic)
    if w is None or len(b) != 1024 + w * n:
        return None
    return w, list(struct.unpack_from("<%d%s" % (n, "H" if w == 2 else "I"), b, 1024))


def lib_encode(text_json, doc):
    """The library on tokenizer text_json (bytes) and document doc (bytes): ('ok', ids),
    ('refused', why), or ('none', '') without the library."""
    if tokenizers is None:
        return "none", ""
    try:
        t = tokenizers.Tokenizer.from_str(text_json.decode("utf-8"))
        return "ok", t.encode(doc.decode("utf-8", "replace"), add_special_tokens=False).ids
    except BaseException as e:  # PanicException derives from BaseException
        if isinstance(e, KeyboardInterrupt):
            raise
        return "refused", str(e)[:200]


# ---- tokenizer.json mutations ----------------------------------------------------------

MISSING = object()
BAD_VALUES = [MISSING, None, "", "x", 0, -1, 1.5, True, [], {}, [1], {"type": "X"}]


def get_path(d, path):
    for k in path:
        d = d[k]
    return d


def set_path(d, path, v):
    d = copy.deepcopy(d)
    o = d
    for k in path[:-1]:
        o = o[k]
    if v is MISSING:
        if isinstance(o, dict):
            o.pop(path[-1], None)
        else:
            del o[path[-1]]
    else:
        o[path[-1]] = v
    return d


def field_paths(d):
    """Every field of the tokenizer's structure (not each vocabulary entry or merge)."""
    out = []

    def walk(o, path, depth):
        if depth > 6:
            return
        if isinstance(o, dict):
            for k, v in o.items():
                if path[-1:] == ["vocab"]:
                    continue
                out.append(path + [k])
                walk(v, path + [k], depth + 1)
        elif isinstance(o, list):
            if path[-1:] == ["merges"]:
                out.append(path + [0])
                return
            for i, v in enumerate(o[:3]):
                out.append(path + [i])
                walk(v, path + [i], depth + 1)
    walk(d, [], 0)
    return out


def label_path(path):
    return ".".join(str(p) for p in path) or "(root)"


def dumps(d):
    return json.dumps(d, ensure_ascii=False).encode("utf-8")


def split_merge(m):
    return m.split(" ", 1) if isinstance(m, str) else list(m)


def tok_cases(rng, tmp):
    """[(label, bytes or maker(path), valid: True / False / None (ask the oracle))]"""
    cases = []
    docs = {k: json.loads(golden(k)) for k in KINDS}
    for k in KINDS:
        cases.append(("golden %s" % k, golden(k), True))
    # truncations and byte flips of the text
    for k in KINDS:
        g = golden(k)
        for frac in [0, 0.001, 0.1, 0.5, 0.9, 0.999]:
            cases.append(("%s truncated to %d bytes" % (k, int(len(g) * frac)), g[:int(len(g) * frac)], False))
        cases.append(("%s minus its last byte" % k, g[:-1], False))
    flips = []
    for k in KINDS:
        g = golden(k)
        for _ in range(40):
            b = bytearray(g)
            for _ in range(rng.choice([1, 1, 2, 4])):
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            flips.append(("%s byte flip %d" % (k, len(flips)), bytes(b), None))
    cases += flips
    # every field: missing, null, and the wrong JSON types
    fields = []
    for k in KINDS:
        for path in field_paths(docs[k]):
            for v in BAD_VALUES:
                fields.append(("%s %s = %s" % (k, label_path(path), "(missing)" if v is MISSING else json.dumps(v)),
                               dumps(set_path(docs[k], path, v)), None))
    cases += rng.sample(fields, min(len(fields), 420))
    # vocabulary ids
    for k in ["gpt2", "llama2"]:
        d = docs[k]
        vocab = d["model"]["vocab"]
        some = sorted(vocab)[len(vocab) // 2]
        top = max(vocab.values())
        for v, ok in [(-1, False), (-2147483648, False), (2147483647, False), (2147483648, False),
                      (4294967296 + 5, False), (1 << 62, False), (10 ** 9, None), (10 ** 7, None),
                      (70000, None), (65535, None), (top + 1, None), ("7", False), (1.0, None), (None, False)]:
            dd = copy.deepcopy(d)
            dd["model"]["vocab"]["zz-new-token"] = v
            cases.append(("%s vocab new token id %r" % (k, v), dumps(dd), ok))
        dd = copy.deepcopy(d)
        dd["model"]["vocab"][some] = vocab[sorted(vocab)[0]]
        cases.append(("%s vocab duplicated id" % k, dumps(dd), False))
        dd = copy.deepcopy(d)
        dd["model"]["vocab"] = {s: (i if i < 100 else i + 1000) for s, i in vocab.items()}
        cases.append(("%s vocab with a gap of 1000 ids" % k, dumps(dd), None))
        dd = copy.deepcopy(d)
        dd["model"]["vocab"] = {}
        dd["model"]["merges"] = []
        cases.append(("%s empty vocab and merges" % k, dumps(dd), None))
        for a in d["added_tokens"][:2]:
            for v in [top + 5, 3, -1, 2 ** 31, 1 << 40, 10 ** 8]:
                dd = copy.deepcopy(d)
                for x in dd["added_tokens"]:
                    if x["content"] == a["content"]:
                        x["id"] = v
                cases.append(("%s added %s id %d" % (k, a["content"], v), dumps(dd), None))
        dd = copy.deepcopy(d)
        dd["added_tokens"].append(dict(d["added_tokens"][0]))
        cases.append(("%s added token repeated" % k, dumps(dd), None))
        dd = copy.deepcopy(d)
        dd["added_tokens"].append(dict(d["added_tokens"][0], content="<new>"))
        cases.append(("%s two added tokens, one id" % k, dumps(dd), None))
    # merges
    for k in ["gpt2", "llama3", "sp"]:
        d = docs[k]
        m = d["model"]["merges"]
        a, b = split_merge(m[5])
        for label, new in [("as strings", [" ".join(split_merge(x)) for x in m]),
                           ("as pairs", [split_merge(x) for x in m]),
                           ("mixed", [(" ".join(split_merge(x)) if i % 2 else split_merge(x)) for i, x in enumerate(m)]),
                           ("no space", m[:5] + [a + b] + m[6:]),
                           ("three parts", m[:5] + [a + " " + b + " " + a] + m[6:]),
                           ("empty string", m[:5] + [""] + m[6:]),
                           ("a space", m[:5] + [" "] + m[6:]),
                           ("leading space", m[:5] + [" " + a] + m[6:]),
                           ("trailing space", m[:5] + [a + " "] + m[6:]),
                           ("a pair of three", m[:5] + [[a, b, a]] + m[6:]),
                           ("a pair of one", m[:5] + [[a]] + m[6:]),
                           ("a pair of numbers", m[:5] + [[1, 2]] + m[6:]),
                           ("unknown left", m[:5] + ["zzqq " + b] + m[6:]),
                           ("unknown right", m[:5] + [[a, "zzqq"]] + m[6:]),
                           ("merged unknown", m[:5] + [[b + "zzqq"[:0], "qqzz"]] + m[6:]),
                           ("duplicated", m + m[:10]),
                           ("reversed", list(reversed(m))),
                           ("none", []),
                           ("an object", {"a": "b"}),
                           ("a string", "a b")]:
            dd = copy.deepcopy(d)
            dd["model"]["merges"] = new
            cases.append(("%s merges %s" % (k, label), dumps(dd), None))
    # byte-level vocabularies missing byte tokens (merges using them dropped)
    for k in ["gpt2", "llama3", "qwen2"]:
        d = docs[k]
        chars = [c for c in d["model"]["vocab"] if len(c) == 1]
        for drop in [["Ġ"], ["a", "e"], rng.sample(chars, 5), chars[:128]]:
            dd = copy.deepcopy(d)
            for c in drop:
                dd["model"]["vocab"].pop(c, None)
            dd["model"]["merges"] = [x for x in dd["model"]["merges"]
                                     if all(p in dd["model"]["vocab"] for p in split_merge(x))
                                     and "".join(split_merge(x)) in dd["model"]["vocab"]]
            cases.append(("%s without the byte tokens %s" % (k, "".join(drop)[:20]), dumps(dd), None))
    # invalid Unicode / NUL, raw and escaped, in vocabulary and added tokens
    for k in ["gpt2", "llama2"]:
        g = golden(k).decode()
        tok = json.dumps(docs[k]["added_tokens"][0]["content"])
        word = json.dumps(sorted(docs[k]["model"]["vocab"])[40])
        for label, bad in [("\\ud800", "\\ud800"), ("\\udfff", "\\udfff"), ("\\ud800\\u0041", "\\ud800\\u0041"),
                           ("\\u0000", "\\u0000"), ("a NUL byte", "\x00"), ("raw 0xff", "\udcff"),
                           ("overlong C0 80", "\udcc0\udc80"), ("raw CESU surrogate", "\udced\udca0\udc80"),
                           ("a raw control byte", "\x01"), ("\\uffff", "\\uffff"), ("U+10FFFF", "\U0010ffff")]:
            for where, s in [("vocab key", word), ("added token", tok)]:
                t = g.replace(s, s[:-1] + bad + '"', 1)
                cases.append(("%s %s with %s" % (k, where, label), t.encode("utf-8", "surrogateescape"), None))
        dd = copy.deepcopy(docs[k])
        dd["added_tokens"][0]["content"] = ""
        cases.append(("%s an empty added token" % k, dumps(dd), None))
    # sizes: long strings, big vocabularies, deep nesting
    d = docs["gpt2"]
    for n in [1 << 16, 1 << 20, 8 << 20]:
        dd = copy.deepcopy(d)
        dd["model"]["vocab"]["Ġ" + "a" * n] = max(d["model"]["vocab"].values()) + 1
        cases.append(("gpt2 a vocabulary token of %d characters" % n, dumps(dd), None))
        dd = copy.deepcopy(d)
        dd["added_tokens"].append({"id": max(d["model"]["vocab"].values()) + 1, "content": "x" * n,
                                   "single_word": False, "lstrip": False, "rstrip": False,
                                   "normalized": False, "special": True})
        cases.append(("gpt2 an added token of %d characters" % n, dumps(dd), None))

    def big_vocab(n):
        def make(p):
            dd = copy.deepcopy(d)
            v = dd["model"]["vocab"]
            base = max(v.values()) + 1
            for i in range(n):
                v["zz%d" % i] = base + i
            with open(p, "wb") as f:
                f.write(dumps(dd))
        return make
    for n in [1 << 20, 3 << 20]:
        cases.append(("gpt2 with %d more vocabulary entries" % n, big_vocab(n), None))
    for depth in [100, 1000, 2100, 100000]:
        for where in ["normalizer", "truncation", "model.vocab.x"]:
            nest = ("[" * depth + "]" * depth).encode()
            if where == "truncation":
                nest = ('{"a":' * depth + "1" + "}" * depth).encode()
            dd = copy.deepcopy(d)
            if where == "model.vocab.x":
                dd["model"]["vocab"]["x"] = "@@"
            else:
                dd[where] = "@@"
            cases.append(("gpt2 %s nested %d deep" % (where, depth), dumps(dd).replace(b'"@@"', nest, 1), False))
    for depth in [2, 8, 9, 50, 1000]:  # written as text: json.dumps stops at Python's recursion limit
        for kind, comp, key, inner in [("qwen2", "normalizer", "normalizers", {"type": "NFC"}),
                                       ("gpt2", "decoder", "decoders", {"type": "ByteLevel"}),
                                       ("gpt2", "pre_tokenizer", "pretokenizers", docs["gpt2"]["pre_tokenizer"])]:
            seq = '{"type": "Sequence", "%s": [' % key * depth + json.dumps(inner) + "]}" * depth
            t = dumps(dict(docs[kind], **{comp: "@@"})).replace(b'"@@"', seq.encode(), 1)
            cases.append(("%s %s Sequence nested %d deep" % (kind, comp, depth), t, None))
    for comp, key in [("normalizer", "normalizers"), ("pre_tokenizer", "pretokenizers"), ("decoder", "decoders"),
                      ("post_processor", "processors")]:
        cases.append(("gpt2 %s an empty Sequence" % comp, dumps(dict(d, **{comp: {"type": "Sequence", key: []}})), None))
        cases.append(("gpt2 %s a Sequence of nulls" % comp, dumps(dict(d, **{comp: {"type": "Sequence", key: [None]}})), None))
        cases.append(("gpt2 %s a Sequence of 9 NFCs" % comp,
                      dumps(dict(d, **{comp: {"type": "Sequence", key: [{"type": "NFC"}] * 9}})), None))
        for ty in ["Bogus", "", "sequence", "Sequence\u0000", "WordPiece", "Precompiled", "BertPreTokenizer",
                   "RobertaProcessing", "CTC"]:
            cases.append(("gpt2 %s type %r" % (comp, ty), dumps(dict(d, **{comp: {"type": ty}})), None))
    for ty in ["WordPiece", "Unigram", "WordLevel", "bpe", ""]:
        cases.append(("gpt2 model type %r" % ty, dumps(set_path(d, ["model", "type"], ty)), False))
    # pre-tokenizer regexes
    def split(pattern, key="Regex", behavior="Isolated"):
        return {"type": "Split", "pattern": {key: pattern}, "behavior": behavior, "invert": False}
    for pat, ok in [("(", False), ("[a", False), ("\\", False), ("a{2,1}", False), ("(?<=a+)b", None),
                    ("\\p{Bogus}", False), ("(?P<n>a)(?P<n>b)", False), ("\\k<zz>", False), ("*", False),
                    ("", None), ("(?:)", None), ("a|", None), ("\\b", None), ("$", None), ("(?=a)", None),
                    ("(a+)+$", None), ("(a|aa)+$", None), ("(a*)*b", None), ("(?:a|b)*c|a", None),
                    ("(\\w+\\s?)+$", None), ("(.*a){12}", None), ("\\X", None), ("\\C", None), ("(?C1)a", None),
                    ("(*LIMIT_MATCH=1)a", None), ("(*UTF)a", None), ("(?R)", None), ("((?R))a", None),
                    (" ?\\p{L}+", True), ("\\s+", True)]:
        pre = {"type": "Sequence", "pretokenizers": [split(pat), d["pre_tokenizer"]]}
        cases.append(("gpt2 Split Regex %r" % pat, dumps(dict(d, pre_tokenizer=pre)), ok))
    for pat in ["", "a", "\\", "(", "\u2581"]:
        pre = {"type": "Sequence", "pretokenizers": [split(pat, "String"), d["pre_tokenizer"]]}
        cases.append(("gpt2 Split String %r" % pat, dumps(dict(d, pre_tokenizer=pre)), None))
    for beh in ["Removed", "Isolated", "MergedWithPrevious", "Contiguous", "", None]:
        pre = {"type": "Sequence", "pretokenizers": [split("\\s+", behavior=beh), d["pre_tokenizer"]]}
        cases.append(("gpt2 Split behavior %r" % beh, dumps(dict(d, pre_tokenizer=pre)), None))
    # Metaspace / Strip / Replace arguments
    m = docs["mistral"]
    for rep in ["", "ab", "\u2581\u2581", " ", "\x00", "\U0001f600"]:
        cases.append(("mistral Metaspace replacement %r" % rep,
                      dumps(set_path(m, ["pre_tokenizer", "replacement"], rep)), None))
    for ps in ["first", "always", "never", "First", "", 1]:
        cases.append(("mistral Metaspace prepend_scheme %r" % ps,
                      dumps(set_path(m, ["pre_tokenizer", "prepend_scheme"], ps)), None))
    for field, v in [("start", -1), ("start", 2 ** 31), ("start", 2 ** 32), ("stop", 2 ** 40), ("start", 1.5),
                     ("content", ""), ("content", "ab"), ("content", "\u2581")]:
        cases.append(("mistral decoder Strip %s %r" % (field, v),
                      dumps(set_path(m, ["decoder", "decoders", 3, field], v)), None))
    for v in ["", "\u2581\u2581", "x" * 1000]:
        cases.append(("mistral decoder Replace pattern %r" % v[:10],
                      dumps(set_path(m, ["decoder", "decoders", 0, "pattern"], {"String": v})), None))
    # TemplateProcessing
    l3 = docs["llama3"]
    pp = l3["post_processor"]
    tmpl = [x for x in (pp.get("processors") or [pp]) if x.get("type") == "TemplateProcessing"]
    if tmpl:
        path = ["post_processor"] + (["processors", (pp.get("processors") or [pp]).index(tmpl[0])] if "processors" in pp else [])
        special = list(tmpl[0]["special_tokens"])[0]
        for label, v in [("ids []", []), ("ids [-1]", [-1]), ("ids [2^31]", [2 ** 31]), ("ids [1e9]", [10 ** 9]),
                         ("ids of 9", [0] * 9), ("ids ['a']", ["a"])]:
            cases.append(("llama3 template %s" % label,
                          dumps(set_path(l3, path + ["special_tokens", special, "ids"], v)), None))
        for label, v in [("empty", []), ("no $A", [tmpl[0]["single"][0]]), ("$A twice", tmpl[0]["single"] * 2),
                         ("$B", [{"Sequence": {"id": "B", "type_id": 0}}]), ("numbers", [1, 2])]:
            cases.append(("llama3 template single %s" % label, dumps(set_path(l3, path + ["single"], v)), None))
    # the root
    for label, t in [("empty", b""), ("null", b"null"), ("[]", b"[]"), ("{}", b"{}"), ("a number", b"42"),
                     ("a string", b'"x"'), ("two objects", golden("gpt2") + golden("gpt2")),
                     ("a BOM", b"\xef\xbb\xbf" + golden("gpt2")), ("UTF-16", golden("gpt2").decode().encode("utf-16")),
                     ("trailing garbage", golden("gpt2") + b"x"), ("trailing spaces", golden("gpt2") + b" \n\t"),
                     ("a duplicated key", golden("gpt2").replace(b'"truncation": null', b'"truncation": null, "truncation": null', 1))]:
        cases.append(("root %s" % label, t, True if label == "trailing spaces" else None))
    # paths that are not regular files
    cases.append(("a directory", lambda p: os.mkdir(p), False))
    cases.append(("a FIFO", lambda p: os.mkfifo(p), False))
    cases.append(("-> /dev/zero", lambda p: os.symlink("/dev/zero", p), False))
    cases.append(("-> /dev/null", lambda p: os.symlink("/dev/null", p), False))
    cases.append(("a symlink loop", lambda p: os.symlink(p, p), False))
    cases.append(("dangling symlink", lambda p: os.symlink(p + ".nowhere", p), False))
    cases.append(("missing", lambda p: None, False))
    cases.append(("-> a valid file", lambda p: (open(p + ".real", "wb").write(golden("gpt2")), os.symlink(p + ".real", p)), True))
    cases.append(("a 1 GiB + 1 sparse file", lambda p: open(p, "wb").truncate((1 << 30) + 1), False))
    return cases


def fuzz_tokenizers(r, n, rng, tmp, doc):
    docpath = os.path.join(tmp, "doc.txt")
    with open(docpath, "wb") as f:
        f.write(doc)
    cases = tok_cases(rng, tmp)
    fixed = [c for c in cases if "byte flip" not in c[0] and " = " not in c[0]]
    mut = [c for c in cases if c not in fixed]  # flips and field types: a sample when n is small
    plan = fixed + mut[:max(0, n - len(fixed))]
    stats = {"cases": 0, "both_accept_same_ids": 0, "library_refused_too": 0, "pptrain_refuses_more": 0}
    for k, (label, make, valid) in enumerate(plan):
        p = os.path.join(tmp, "t%d.json" % k)
        if callable(make):
            make(p)
        else:
            with open(p, "wb") as f:
                f.write(make)
        out = os.path.join(tmp, "o%d" % k, "x.bin")
        t0 = time.time()
        kind, rc, text = r.run(["prepare-data", "--tokenizer", p, "--text", docpath, "--out", out, "--threads", "1"],
                               limit=60, cwd=tmp)
        stats["cases"] += 1
        if kind:
            r.record("tok", kind, label, text)
        else:
            verdict = judge_tok(label, p, make if not callable(make) else None, doc, valid, rc, text, out, stats)
            if verdict is None and time.time() - t0 > 20:
                verdict = ("slow", "took %.0f s" % (time.time() - t0))
            r.record("tok", verdict[0] if verdict else "ok", label, verdict[1] if verdict else "")
        shutil.rmtree(os.path.dirname(out), ignore_errors=True)
        for x in [p, p + ".real"]:
            if os.path.islink(x) or os.path.isfile(x):
                os.remove(x)
            elif os.path.isdir(x):
                os.rmdir(x)
    return stats


# Accepted by pptrain, refused by the library, judged harmless: a Sequence nested in a
# Sequence (or deeper than serde_json's 128 levels) reads as the flat list of its steps; a
# null step in a Sequence is no step; PCRE2-only pattern syntax (verbs, callouts) that
# Oniguruma refuses matches as PCRE2 documents it.
LENIENT = ("Sequence nested", "a Sequence of nulls", "Split Regex '(*", "Split Regex '(?C")
# ... and fields pptrain does not read (the pair template, type ids, offsets, the version,
# the ByteLevel post-processor's and decoder's flags, which change no id) or reads with the
# library's default when they are missing or null.
LENIENT_FIELDS = (".pair", "type_id", "trim_offsets", "special_tokens.", "version",
                  "post_processor.add_prefix_space", "post_processor.use_regex",
                  "processors.0.add_prefix_space", "processors.0.use_regex", "decoder.add_prefix_space",
                  "decoder.use_regex")
LENIENT_MISSING = tuple("%s = %s" % (f, v) for f in ("rstrip", "lstrip", "single_word", "normalized", "special")
                        for v in ("(missing)", "null"))
LENIENT_LIBRARY = ("Unknown tokenizer version",)


def judge_tok(label, path, data, doc, valid, rc, text, out, stats):
    """None when the outcome is right, else (kind, detail)."""
    named = "error:" in text and path in text.split("error:", 1)[1]
    if rc != 0:
        if valid:
            return "wrong", "a valid tokenizer refused (rc %s)\n%s" % (rc, text)
        if not named:
            return "wrong", "refused without an error line naming the file (rc %s)\n%s" % (rc, text)
        if valid is None and data is not None:
            lib = lib_encode(data, doc)[0]
            stats["pptrain_refuses_more" if lib == "ok" else "library_refused_too"] += 1
        return None
    if valid is False:
        return "wrong", "a bad tokenizer accepted\n" + text
    got = read_bin(out)
    if got is None:
        return "wrong", "accepted, but %s is no token file\n%s" % (out, text)
    if data is None:
        return None
    lib, ids = lib_encode(data, doc)
    if lib == "refused":
        harmless = any(x in label for x in LENIENT + LENIENT_FIELDS + LENIENT_MISSING)
        kind = "lenient" if harmless or any(x in ids for x in LENIENT_LIBRARY) else "wrong"
        return kind, "accepted a file the tokenizers library refuses (%s)\n%s" % (ids, text)
    if lib == "ok":
        if got[1][1:] != ids:
            return "wrong", "ids differ from the library's: first at %s\n%s" % (
                next((i for i, (a, b) in enumerate(zip(got[1][1:], ids)) if a != b), min(len(got[1]) - 1, len(ids))), text)
        stats["both_accept_same_ids"] += 1
    return None


# ---- prepare-data inputs and options -------------------------------------------------------

class PeakRss:
    """The largest peak RSS (VmHWM) of this process's children while it is open, in MB:
    a thread looks every 20 ms (getrusage's children maximum is over all of them)."""

    def __enter__(self):
        self.peak, self.stop = 0.0, threading.Event()
        self.thread = threading.Thread(target=self.watch, daemon=True)
        self.thread.start()
        return self

    def watch(self):
        me = str(os.getpid())
        while not self.stop.wait(0.02):
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    with open("/proc/%s/status" % pid) as fh:
                        st = fh.read()
                except OSError:
                    continue
                f = dict(l.split(":", 1) for l in st.splitlines() if ":" in l)
                if f.get("PPid", "").strip() == me and "VmHWM" in f:
                    self.peak = max(self.peak, int(f["VmHWM"].split()[0]) / 1024)

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def prep_cases(rng, tmp):
    """[(label, args builder(dir) -> argv, expect)]: expect "ok", "refused", or a function
    (rc, output, dir) -> None | (kind, detail)."""
    c = []
    gpt2, llama2 = os.path.join(TOKDIR, "gpt2.json"), os.path.join(TOKDIR, "llama2.json")
    llama3 = os.path.join(TOKDIR, "llama3.json")

    def f(name, data):
        def make(d):
            p = os.path.join(d, name)
            with open(p, "wb") as fh:
                fh.write(data)
            return p
        return make

    def text(label, data, expect, tok=gpt2, extra=()):
        def args(d):
            return (["--tokenizer", tok] if tok else []) + ["--text", f("in.txt", data)(d), "--out",
                                                            os.path.join(d, "o", "x.bin")] + list(extra)
        c.append((label, args, expect))

    def jsonl(label, data, expect, field="text", tok=gpt2, extra=()):
        def args(d):
            return ["--tokenizer", tok, "--jsonl", f("in.jsonl", data)(d), "--field", field, "--out",
                    os.path.join(d, "o", "x.bin")] + list(extra)
        c.append((label, args, expect))

    good = b"Hello world.\nA second line.\n"
    for tok in [None, gpt2, llama2]:
        name = os.path.basename(tok) if tok else "byte-level"
        text("%s text" % name, good, "ok", tok)
        text("%s invalid UTF-8" % name, b"a\xff\xfeb\xc0\x80c\xed\xa0\x80d\xf4\x90\x80\x80e\xe2\x82", "ok", tok)
        text("%s NUL bytes" % name, b"a\x00b\x00\x00c", "ok", tok)
        text("%s CRLF" % name, b"a\r\nb\r\n\r\n", "ok", tok)
        text("%s a lone CR" % name, b"\r", "ok", tok)
        text("%s a BOM" % name, b"\xef\xbb\xbfhello", "ok", tok)
        text("%s empty" % name, b"", "refused", tok)
        text("%s one byte" % name, b"x", "ok", tok)
        text("%s binary" % name, bytes(rng.randrange(256) for _ in range(5000)), "ok", tok)
    text("gpt2 an added token in the text", b"a<|endoftext|>b", "ok")
    # a long single line: memory bounded
    for mb, tok in [(100, None), (8, gpt2), (1, llama2)]:  # llama2: the whole line is one BPE word
        c.append(("%s a %d MB single line" % (os.path.basename(tok) if tok else "byte-level", mb),
                  (lambda d, mb=mb, tok=tok: (["--tokenizer", tok] if tok else []) +
                   ["--text", big_line(d, mb), "--out", os.path.join(d, "o", "x.bin"), "--threads", "2"]),
                  ("memory", mb)))
    c.append(("jsonl a 100 MB line without the field",
              lambda d: ["--tokenizer", gpt2, "--jsonl", big_jsonl(d, 100, "other"), "--field", "text", "--out",
                         os.path.join(d, "o", "x.bin")], ("memory-refused", 100)))
    c.append(("jsonl an 8 MB record",
              lambda d: ["--tokenizer", gpt2, "--jsonl", big_jsonl(d, 8, "text"), "--field", "text", "--out",
                         os.path.join(d, "o", "x.bin")], ("memory", 8)))
    # JSONL records
    rec = b'{"text": "Hello world."}\n'
    for label, data, exp in [
            ("valid", rec * 3, "ok"), ("no final newline", rec + rec[:-1], "ok"),
            ("blank lines", b"\n\n" + rec + b"  \n\t\r\n" + rec, "ok"), ("CRLF lines", rec.replace(b"\n", b"\r\n") * 2, "ok"),
            ("only blank lines", b"\n \n\r\n", "refused"), ("empty", b"", "refused"),
            ("a BOM", b"\xef\xbb\xbf" + rec, "refused"), ("a BOM on line 2", rec + b"\xef\xbb\xbf" + rec, "refused"),
            ("an array line", rec + b"[1, 2]\n", "refused"), ("a string line", b'"text"\n', "refused"),
            ("a number line", b"42\n", "refused"), ("null", b"null\n", "refused"), ("true", b"true\n", "refused"),
            ("invalid JSON", rec + b'{"text": }\n', "refused"), ("unterminated", b'{"text": "abc\n', "refused"),
            ("two records on a line", rec[:-1] + rec, "refused"), ("a record split over lines", b'{"text":\n"a"}\n', "refused"),
            ("field missing", b'{"other": "x"}\n', "refused"), ("field null", b'{"text": null}\n', "refused"),
            ("field a number", b'{"text": 5}\n', "refused"), ("field an array", b'{"text": ["a"]}\n', "refused"),
            ("field an object", b'{"text": {"text": "a"}}\n', "refused"), ("field a boolean", b'{"text": true}\n', "refused"),
            ("field an empty string", b'{"text": ""}\n' + rec, "ok"), ("all fields empty", b'{"text": ""}\n' * 3, "refused"),
            ("field twice", b'{"text": "a", "text": "b"}\n', None), ("\\u0000 in the text", b'{"text": "a\\u0000b"}\n', "ok"),
            ("\\ud800 in the text", b'{"text": "a\\ud800b"}\n', "refused"),
            ("raw invalid UTF-8 in the text", b'{"text": "a\xffb"}\n', "refused"),
            ("a raw NUL in the line", b'{"text": "a\x00b"}\n', "refused"),
            ("a raw newline-free control", b'{"text": "a\x01b"}\n', "refused"),
            ("nested 100000 deep", b'{"text": "a", "x": ' + b"[" * 100000 + b"]" * 100000 + b"}\n", "refused"),
            ("a 1 MB key list", b'{' + b", ".join(b'"k%d": 1' % i for i in range(100000)) + b'}\n', "refused"),
            ("bad line after 3000 good ones", rec * 3000 + b"{\n", "refused"),
            ("a 2 MB record", b'{"text": "' + b"ab " * 700000 + b'"}\n', "ok"),
            ("records across batches", (b'{"text": "' + b"x" * 1000 + b'"}\n') * 3000, "ok")]:
        jsonl("jsonl %s" % label, data, exp)
    jsonl("jsonl --field empty", rec, "refused", field="")
    jsonl("jsonl --field a dotted path", b'{"a": {"b": "x"}}\n', "refused", field="a.b")
    jsonl("jsonl --field with a NUL-free odd name", b'{"\xc3\xa9": "x"}\n', "ok", field="\u00e9")
    # options
    for opt, vals in [("--val-fraction", [("-1", 0), ("0", 1), ("1", 0), ("2", 0), ("nan", 0), ("inf", 0), ("-0", 1),
                                          ("0.5", 1), ("1e-300", 0), ("0.999999", 1), ("", 0), ("0x0.8p0", 1), ("5e-1", 1)]),
                      ("--shard-tokens", [("0", 0), ("1", 1), ("-1", 0), ("2147483647", 1), ("2147483648", 0),
                                          ("9223372036854775808", 0), ("1e3", 0), ("", 0), ("3", 1)]),
                      ("--threads", [("0", 0), ("-1", 0), ("1000000", 0), ("1", 1), ("3", 1), ("1024", 1), ("x", 0), ("", 0)])]:
        for v, ok in vals:
            if opt == "--val-fraction" and ok and v not in ("0", "-0"):  # enough documents for a val split
                exp = "refused" if v == "0.999999" else "ok"  # every one of 40 documents to val
                jsonl("jsonl %s %s" % (opt, v), rec * 40, exp, extra=(opt, v))
            else:
                text("gpt2 %s %r" % (opt, v), good * 4, "ok" if ok else "refused", extra=(opt, v))
                text("byte-level %s %r" % (opt, v), good * 4, "ok" if ok else "refused", tok=None, extra=(opt, v))
    for dt, exp in [("<|endoftext|>", "ok"), ("<nope>", "refused"), ("", "refused"), ("Ġthe", "ok"), ("\u0120", "ok")]:
        text("gpt2 --doc-token %r" % dt, good, exp, extra=("--doc-token", dt))
    text("llama2 --doc-token '<s>'", good, "ok", tok=llama2, extra=("--doc-token", "<s>"))
    text("byte-level --doc-token", good, "refused", tok=None, extra=("--doc-token", "x"))
    # outputs
    c.append(("--out in a missing directory (made)", lambda d: ["--text", f("in.txt", good)(d), "--out",
                                                                 os.path.join(d, "new", "deeper", "x.bin")], "ok"))
    c.append(("--out under a file", lambda d: ["--text", f("in.txt", good)(d), "--out", os.path.join(f("file", b"x")(d), "x.bin")],
              "refused"))
    c.append(("--out a directory", lambda d: ["--text", f("in.txt", good)(d), "--out", (os.mkdir(os.path.join(d, "dd")), os.path.join(d, "dd"))[1]],
              "refused"))
    c.append(("--out in /proc", lambda d: ["--text", f("in.txt", good)(d), "--out", "/proc/x.bin"], "refused"))
    c.append(("--out empty", lambda d: ["--text", f("in.txt", good)(d), "--out", ""], "refused"))
    c.append(("--out too long", lambda d: ["--text", f("in.txt", good)(d), "--out", os.path.join(d, "a" * 5000)], "refused"))
    c.append(("--out the input itself", lambda d: ["--text", f("in.txt", good)(d), "--out", os.path.join(d, "in.txt")], None))
    c.append(("stdin '-' twice", lambda d: ["--text", "-", "-", "--out", os.path.join(d, "o", "x.bin")], "refused"))
    c.append(("--text and --jsonl", lambda d: ["--tokenizer", gpt2, "--text", f("a", good)(d), "--jsonl", f("b", rec)(d),
                                               "--field", "text", "--out", os.path.join(d, "o", "x.bin")], "refused"))
    c.append(("--jsonl without --field", lambda d: ["--tokenizer", gpt2, "--jsonl", f("b", rec)(d), "--out",
                                                    os.path.join(d, "o", "x.bin")], "refused"))
    c.append(("--jsonl byte-level", lambda d: ["--jsonl", f("b", rec)(d), "--field", "text", "--out",
                                               os.path.join(d, "o", "x.bin")], "refused"))
    for label, mk in [("a directory", lambda d: (os.mkdir(os.path.join(d, "in")), os.path.join(d, "in"))[1]),
                      ("a FIFO", lambda d: (os.mkfifo(os.path.join(d, "in")), os.path.join(d, "in"))[1]),
                      ("/dev/zero", lambda d: "/dev/zero"), ("missing", lambda d: os.path.join(d, "nowhere")),
                      ("a symlink loop", lambda d: (os.symlink(os.path.join(d, "in"), os.path.join(d, "in")), os.path.join(d, "in"))[1]),
                      ("empty name", lambda d: "")]:
        c.append(("input %s" % label, lambda d, mk=mk: ["--tokenizer", gpt2, "--text", mk(d), "--out",
                                                          os.path.join(d, "o", "x.bin")], "refused"))
    # a refusal over good files: they must survive as they were
    for label, args in [
            ("bad JSONL over good files", lambda d: ["--tokenizer", gpt2, "--jsonl", f("b", rec * 5000 + b"x\n")(d), "--field",
                                                     "text", "--out", os.path.join(d, "keep", "x.bin"), "--val-fraction", "0.1"]),
            ("bad JSONL over good shards", lambda d: ["--tokenizer", gpt2, "--jsonl", f("b", rec * 5000 + b"x\n")(d), "--field",
                                                      "text", "--out", os.path.join(d, "keep", "x"), "--shard-tokens", "100",
                                                      "--val-fraction", "0.1"]),
            ("bad tokenizer over good files", lambda d: ["--tokenizer", f("t.json", b"{")(d), "--text", f("a", good)(d),
                                                         "--out", os.path.join(d, "keep", "x.bin")]),
            ("val-fraction too big over good files", lambda d: ["--tokenizer", gpt2, "--text", f("a", b"hi")(d),
                                                                "--out", os.path.join(d, "keep", "x.bin"), "--val-fraction", "0.3"])]:
        c.append((label, args, "keep"))
    # a pattern that backtracks on a long document: a message, in bounded time, not a hang
    for pat in ["(?:a|b)*c|a", "(a|aa)+$", "(\\w+\\s?)+$"]:
        c.append(("a 1 MB document through Split %r" % pat,
                  lambda d, pat=pat: ["--tokenizer", split_tok(d, pat), "--text",
                                      f("a", b"a" * (1 << 20) + b"!")(d), "--out", os.path.join(d, "o", "x.bin")],
                  "refused"))
    # ids >= 65536: uint32 files
    c.append(("a tokenizer with an id of 70000: uint32", lambda d: ["--tokenizer", wide_tok(d), "--text", f("a", b"hi zzwide")(d),
                                                                     "--out", os.path.join(d, "o", "x.bin")], "wide"))
    return c


def big_line(d, mb):
    p = os.path.join(d, "big.txt")
    words = [b"alpha ", b"beta ", b"gamma\t", b"d\xc3\xa9lta ", b"42 "]
    chunk = b"".join(words[i % 5] for i in range(20000))
    with open(p, "wb") as fh:
        for _ in range((mb << 20) // len(chunk)):
            fh.write(chunk)
    return p


def big_jsonl(d, mb, field):
    p = os.path.join(d, "big.jsonl")
    chunk = b"alpha beta gamma delta " * 4000
    with open(p, "wb") as fh:
        fh.write(b'{"%s": "' % field.encode())
        for _ in range((mb << 20) // len(chunk)):
            fh.write(chunk)
        fh.write(b'"}\n')
    return p


def split_tok(d, pat):
    g = json.loads(golden("gpt2"))
    g["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pat}, "behavior": "Isolated", "invert": False}, g["pre_tokenizer"]]}
    p = os.path.join(d, "split.json")
    with open(p, "wb") as fh:
        fh.write(dumps(g))
    return p


def wide_tok(d):
    g = json.loads(golden("gpt2"))
    g["added_tokens"].append({"id": 70000, "content": "zzwide", "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": False})
    p = os.path.join(d, "wide.json")
    with open(p, "wb") as fh:
        fh.write(dumps(g))
    return p


def outputs(d):
    o = os.path.join(d, "o")
    return sorted(os.listdir(o)) if os.path.isdir(o) else []


def fuzz_prepare(r, rng, tmp):
    stats = {"cases": 0, "peak_rss_mb": {}}
    for label, args, expect in prep_cases(rng, tmp):
        d = tempfile.mkdtemp(prefix="p.", dir=tmp)
        keep = None
        if expect == "keep":  # good files first: a valid run with the same --out
            argv = args(d)
            good = list(argv)
            for i, a in enumerate(good):
                if a in ("--jsonl", "--text"):
                    name = os.path.join(d, "good.jsonl" if a == "--jsonl" else "good.txt")
                    with open(name, "wb") as fh:
                        fh.write(b'{"text": "Good text."}\n' * 50 if a == "--jsonl" else b"Good text. " * 50)
                    good[i + 1] = name
                if a == "--tokenizer" and good[i + 1].startswith(d):
                    good[i + 1] = os.path.join(TOKDIR, "gpt2.json")
                if a == "--val-fraction" and "--text" in good:
                    good[i + 1] = "0.1"
            kind, rc, text = r.run(["prepare-data"] + good, limit=60, cwd=d)
            assert kind is None and rc == 0, text
            keep = tree_sum(os.path.join(d, "keep"))
        else:
            argv = args(d)
        t0 = time.time()
        with PeakRss() as rss:
            kind, rc, text = r.run(["prepare-data"] + argv, limit=120 if isinstance(expect, tuple) else 60, cwd=d)
        stats["cases"] += 1
        named = "error:" in text
        verdict = None
        if kind:
            verdict = (kind, text)
        elif expect == "ok" and rc != 0:
            verdict = ("wrong", "a valid input refused (rc %s)\n%s" % (rc, text))
        elif expect == "ok" and not all(read_bin(os.path.join(d, "o", x)) for x in outputs(d)):
            verdict = ("wrong", "accepted, but wrote no valid token file: %s\n%s" % (outputs(d), text))
        elif expect in ("refused", "keep") and rc == 0:
            verdict = ("wrong", "a bad input accepted\n" + text)
        elif expect in ("refused", "keep") and not named:
            verdict = ("wrong", "refused without an error line (rc %s)\n%s" % (rc, text))
        elif expect == "refused" and outputs(d):
            verdict = ("touched", "refused, but left %s\n%s" % (outputs(d), text))
        elif expect == "keep" and tree_sum(os.path.join(d, "keep")) != keep:
            verdict = ("touched", "refused, and the good files changed\n" + text)
        elif expect == "wide":
            got = read_bin(os.path.join(d, "o", "x.bin")) if rc == 0 else None
            if rc != 0 and not named:
                verdict = ("wrong", "refused without an error line\n" + text)
            elif rc == 0 and (got is None or got[0] != 4 or 70000 not in got[1]):
                verdict = ("wrong", "ids over 65535 not written as uint32: %s\n%s" % (got and got[0], text))
        elif isinstance(expect, tuple):  # memory: a bound proportional to the input (ASan's overhead in)
            peak = rss.peak
            stats["peak_rss_mb"][label] = round(peak)
            mb = expect[1]
            if (expect[0] == "memory" and rc != 0) or (expect[0] == "memory-refused" and (rc == 0 or not named)):
                verdict = ("wrong", "rc %s\n%s" % (rc, text))
            elif peak > 400 + 40 * mb:
                verdict = ("wrong", "memory not bounded: a peak of %.0f MB for a %d MB line\n%s" % (peak, mb, text))
        if verdict is None and time.time() - t0 > 60:
            verdict = ("slow", "took %.0f s" % (time.time() - t0))
        r.record("tok-prep", verdict[0] if verdict else "ok", label, verdict[1] if verdict else "")
        shutil.rmtree(d, ignore_errors=True)
    return stats


def fuzz_goldens(r, tmp):
    """Every text of cases.json through each golden tokenizer: the ids of cases.json."""
    cj = cases_json()
    texts = {t["name"]: bytes.fromhex(t["hex"]) for t in cj["texts"]}
    n = 0
    for kind, rows in cj["tokenizers"].items():
        for row in rows:
            data = texts.get(row["name"])
            if not data:  # decode-only rows have no text
                continue
            d = tempfile.mkdtemp(prefix="g.", dir=tmp)
            p = os.path.join(d, "in.txt")
            with open(p, "wb") as fh:
                fh.write(data)
            out = os.path.join(d, "x.bin")
            k, rc, text = r.run(["prepare-data", "--tokenizer", os.path.join(TOKDIR, kind + ".json"), "--text", p,
                                 "--out", out], limit=60, cwd=d)
            got = read_bin(out) if not k and rc == 0 else None
            if k:
                r.record("tok-golden", k, "%s %s" % (kind, row["name"]), text)
            elif got is None or got[1][1:] != row["ids_nospecial"]:
                r.record("tok-golden", "wrong", "%s %s" % (kind, row["name"]), "ids differ from cases.json\n" + text)
            else:
                r.record("tok-golden", "ok", "%s %s" % (kind, row["name"]))
            n += 1
            shutil.rmtree(d, ignore_errors=True)
    return n


def fuzz_tok(r, n, rng):
    """n: the tokenizer.json cases (the fixed ones all run; byte flips and field types fill
    up to n); prepare-data's cases and the goldens' texts always run all."""
    tmp = tempfile.mkdtemp(prefix="fuzztok.", dir=r.out)
    cj = cases_json()
    doc = next(bytes.fromhex(t["hex"]) for t in cj["texts"] if t["name"] == "hard")
    t0 = time.time()
    details = {"oracle": "tokenizers %s" % tokenizers.__version__ if tokenizers else "none"}
    details["tokenizer_files"] = fuzz_tokenizers(r, n, rng, tmp, doc)
    details["tokenizer_seconds"] = round(time.time() - t0)
    t1 = time.time()
    details["prepare"] = fuzz_prepare(r, rng, tmp)
    details["prepare_seconds"] = round(time.time() - t1)
    details["golden_texts"] = fuzz_goldens(r, tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    return details
