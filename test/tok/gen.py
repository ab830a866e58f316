#!/usr/bin/env python3
"""test/tok/gen.py — the goldens of test/test_tok.c, made with the Hugging Face tokenizers
library, and transformers for the files it converts. Run by hand from the repository root
in a Python with transformers 4 (the release line that converted the Hub's Llama 2,
Mistral, TinyLlama and Qwen2 files; 5 builds these tokenizers in code instead and its
SentencePiece BPE conversion fails):

    python3 -m venv /tmp/tf4 && /tmp/tf4/bin/pip install "transformers>=4.57,<5" \
        sentencepiece protobuf
    /tmp/tf4/bin/python test/tok/gen.py          # tokenizers 0.22.2, transformers 4.57.6

make test only reads what it wrote and never needs Python. `python3 test/tok/gen.py --check`
(the tokenizers library alone, any version) encodes and decodes every row again from the
committed files and says whether the library still gives the committed ids and texts.

It trains tiny tokenizers on data/tiny.txt plus hard.txt (vocabularies of a few hundred
tokens, so each tokenizer.json stays small) and writes:

  gpt2.json    GPT-2's kind: the ByteLevel pre-tokenizer with GPT-2's regex, the ByteLevel
               decoder and post-processor, <|endoftext|> special
  llama3.json  Llama 3's kind: Split with Llama 3's regex then ByteLevel without its regex,
               ignore_merges, a TemplateProcessing post-processor that puts
               <|begin_of_text|> first, a few special tokens
  sp.json      SentencePiece's kind as Llama 2's tokenizer.json has it: the normalizer
               Prepend("▁") + Replace(" " -> "▁"), no pre-tokenizer, BPE with byte_fallback
               (<0x00>..<0xFF> in the vocabulary), unk <unk>, fuse_unk, the decoder
               Replace/ByteFallback/Fuse/Strip, <s> first by the template (its trainer's
               limit_alphabet breaks ties in hash order: each run makes another sp.json,
               with the goldens to match)
  qwen2.json   Qwen2's kind, as transformers writes it (its Qwen2Converter, from the
               vocab.json and merges.txt of a byte-level BPE trained under Qwen2's
               pre-tokenizer): the NFC normalizer, Split with Qwen2's regex then ByteLevel
               without its regex, the ByteLevel decoder and post-processor; <|endoftext|>,
               <|im_start|>, <|im_end|> special and <tool_call> not, as Qwen2.5's are
  mistral.json the non-legacy SentencePiece kind (Mistral v0.3, and Llama 2 / TinyLlama
               converted today): a SentencePiece BPE model with byte fallback trained by
               sentencepiece with Llama 2's options, converted by transformers'
               LlamaTokenizerFast.from_pretrained(legacy=False, from_slow=True): no
               normalizer, the Metaspace pre-tokenizer (prepend_scheme first, split false),
               the decoder Replace/ByteFallback/Fuse/Strip, <s> first by the template
  llama2.json  the same model converted with legacy=True, as the Hub's Llama 2 and
               TinyLlama files are: the normalizer Prepend("▁") + Replace(" " -> "▁")
  cases.json   the test texts (as hex: some are not valid UTF-8) and, for each tokenizer,
               the ids of encode(text) ("+": its template's ids, "templates", around the
               next) and encode(text, add_special_tokens=False), and the decodes of those
               ids with and without skip_special_tokens (as hex, "=" where it is the text
               itself); then
               variants: a tokenizer above with some of its components replaced (the
               Metaspace forms: prepend_scheme always, never, first with split, the older
               add_prefix_space, the Metaspace decoder; the NFD, NFKC and NFKD
               normalizers), with the same rows for some of the texts

The tokenizers library takes Python str (Rust &str): a text that is not valid UTF-8 is
given to it as bytes.decode("utf-8", errors="replace"), each maximal ill-formed
subsequence one U+FFFD, which is the contract of tok_encode for such bytes.
"""
import io
import json
import os
import shutil
import sys
import tempfile

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

GPT2_RE = None  # the ByteLevel pre-tokenizer's own (use_regex=True)
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
            r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def hard_text():
    with open(os.path.join(HERE, "hard.txt"), encoding="utf-8", newline="") as f:
        return f.read()


def corpus():
    with open(os.path.join(ROOT, "data", "tiny.txt"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    # runs that teach merges of one repeated letter, of spaces and digits: long words
    # then merge at equal ranks, where the leftmost-first tie-break decides
    runs = ["a" * 64, "ab" * 24, " " * 40 + "x", "1234567890" * 4, mixed_word(200)]
    return lines[:4000] + hard_text().splitlines() * 3 + runs * 20


def mixed_word(n):
    """test_tok.c's long mixed word (the same generator)"""
    x, out = 12345, []
    for _ in range(n):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        out.append("etaoinshr"[(x >> 16) % 9])
    return "".join(out)


def reload(tok, edit):
    """The tokenizer through its JSON with edit(obj) applied (fields trainers reset)."""
    obj = json.loads(tok.to_str())
    edit(obj)
    return Tokenizer.from_str(json.dumps(obj, ensure_ascii=False))


def gpt2():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tr = trainers.BpeTrainer(vocab_size=700, special_tokens=["<|endoftext|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)
    tok.train_from_iterator(corpus(), tr)
    return tok


LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                   "<|end_header_id|>", "<|eot_id|>"]


def llama3():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=800, special_tokens=LLAMA3_SPECIALS,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)
    tok.train_from_iterator(corpus(), tr)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])

    def edit(obj):
        obj["model"]["ignore_merges"] = True
    return reload(tok, edit)


def sp():
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                           normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tr = trainers.BpeTrainer(vocab_size=500, special_tokens=["<unk>", "<s>", "</s>"],
                             limit_alphabet=80, show_progress=False)
    tok.train_from_iterator(corpus(), tr)

    def edit(obj):
        # Llama 2's layout: <unk> <s> </s>, then <0x00>..<0xFF> in the model's vocabulary
        # only (not added tokens), then the learnt ones
        m = obj["model"]
        vocab = {}
        for t, i in m["vocab"].items():
            vocab[t] = i if i < 3 else i + 256
        for b in range(256):
            vocab["<0x%02X>" % b] = 3 + b
        m["vocab"] = vocab
        m["byte_fallback"] = True
        m["fuse_unk"] = True
        obj["post_processor"] = {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    return reload(tok, edit)


def transformers4():
    import transformers
    if int(transformers.__version__.split(".")[0]) != 4:
        sys.exit(f"gen.py: transformers {transformers.__version__}: the conversions need "
                 "transformers 4 (see the top of this file)")
    return transformers


QWEN2_ADDED = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
               ("<tool_call>", False)]


def qwen2(work):
    """A byte-level BPE trained under Qwen2's normalizer and pre-tokenizer, saved as the
    vocab.json and merges.txt Qwen2 shipped, then converted by transformers."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tr = trainers.BpeTrainer(vocab_size=800, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)
    tok.train_from_iterator(corpus(), tr)
    d = os.path.join(work, "qwen2")
    os.makedirs(d)
    tok.model.save(d)
    v = tok.get_vocab_size()
    config = {  # Qwen2.5-Instruct's tokenizer_config.json, its added tokens cut to four
        "tokenizer_class": "Qwen2Tokenizer", "errors": "replace", "model_max_length": 32768,
        "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "unk_token": None, "clean_up_tokenization_spaces": False, "split_special_tokens": False,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "added_tokens_decoder": {
            str(v + i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                         "single_word": False, "special": sp}
            for i, (c, sp) in enumerate(QWEN2_ADDED)}}
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    fast = transformers4().Qwen2TokenizerFast.from_pretrained(d, from_slow=True)
    fast.save_pretrained(os.path.join(d, "out"))
    return os.path.join(d, "out", "tokenizer.json")


def spm_model(work):
    """A SentencePiece BPE model with byte fallback, trained with Llama 2's options."""
    import sentencepiece as spm
    m = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()), model_writer=m, model_type="bpe", vocab_size=800,
        byte_fallback=True, split_digits=True, allow_whitespace_only_pieces=True,
        remove_extra_whitespaces=False, normalization_rule_name="identity",
        character_coverage=0.99995, max_sentence_length=100000, unk_id=0, bos_id=1, eos_id=2,
        pad_id=-1, num_threads=1, minloglevel=2)
    path = os.path.join(work, "tokenizer.model")
    with open(path, "wb") as f:
        f.write(m.getvalue())
    return path


def llama(work, model, legacy):
    """The model converted as transformers converts Llama 2's tokenizer.model."""
    d = os.path.join(work, f"llama_{legacy}")
    os.makedirs(d)
    shutil.copy(model, d)
    fast = transformers4().LlamaTokenizerFast.from_pretrained(d, legacy=legacy, from_slow=True)
    fast.save_pretrained(os.path.join(d, "out"))
    return os.path.join(d, "out", "tokenizer.json")


def metaspace(scheme, split=False):
    return {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split}


SP_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
    {"type": "Fuse"}]}

# (name, base, the components replaced, the texts): the Metaspace forms the Hub's files
# have beside mistral.json's, and the other Unicode normalizers
VARIANTS = [
    ("ms_always_split", "mistral", {"pre_tokenizer": metaspace("always", True),
                                    "decoder": metaspace("always", True)}),
    ("ms_first_split", "mistral", {"pre_tokenizer": metaspace("first", True),
                                   "decoder": metaspace("first", True)}),
    ("ms_never", "mistral", {"pre_tokenizer": metaspace("never"), "decoder": SP_DECODER}),
    ("ms_never_decoder", "mistral", {"pre_tokenizer": metaspace("never", True),
                                     "decoder": metaspace("never", True)}),
    ("ms_add_prefix_space", "mistral", {
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "str_rep": "▁",
                          "add_prefix_space": True},
        "decoder": {"type": "Metaspace", "replacement": "▁", "add_prefix_space": True}}),
    ("ms_replace_first", "mistral", {  # a normalizer that removes the first character
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": ""}}),
    ("nfd", "qwen2", {"normalizer": {"type": "NFD"}}),
    ("nfkc", "qwen2", {"normalizer": {"type": "NFKC"}}),
    ("nfkd", "mistral", {"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKD"}]}}),
]
VARIANT_TEXTS = ["hard", "empty", "space", "spaces", "long_spaces_word", "specials_sp",
                 "specials_sp_mid", "specials_qwen2", "invalid_utf8", "crlf", "unicode",
                 "metaspace"]


def texts():
    hard = hard_text()
    out = [
        ("hard", hard.encode("utf-8")),
        ("empty", b""),
        ("space", b" "),
        ("spaces", b" " * 17),
        ("digits", b"1234567"),
        ("long_word", b"a" * 3000),
        ("mixed_word", mixed_word(3000).encode()),
        ("long_spaces_word", b"x" + b" " * 40 + b"y\t\t z"),
        ("specials_gpt2", b"Hi<|endoftext|>there <|endoftext|> <|endoftext|><|endoftext|>x"),
        ("specials_llama3", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
         "Où est le chat?<|eot_id|> <|end_of_text|>".encode("utf-8")),
        ("specials_sp", b"<s>Hello</s> <s> world<unk>!"),
        ("invalid_utf8", b"ok \xff\xfe then \xe2\x82 cut \xf0\x9f\x98 and \xc0\xaf \xed\xa0\x80"
         b" end\xe2"),
        ("crlf", b"line one\r\nline two\r\n\r\n  \r\n\tend"),
        ("apostrophes", b"I'M HERE, you're there; they'LL see it's 'quoted' 'S"),
        ("specials_sp_mid", b"Hello<s>world </s> ok<s>"),
        ("specials_qwen2", "<|im_start|>user\nHi <tool_call>x</tool_call><|im_end|>\n"
         "<|im_start|>assistant\n".encode("utf-8")),
        ("unicode", unicode_text().encode("utf-8")),
        ("metaspace", "  two leading spaces, a ▁ and ▁▁ in the text,  double  and\ttab "
         "\u00a0nbsp, ▁ ".encode("utf-8")),
        ("leading_space", b" Hello world"),
    ]
    return out


def unicode_text():
    """Text the four normalizers change: decomposed and composed letters, canonical order,
    singletons, exclusions, Hangul, compatibility forms, and characters Unicode assigned
    after 9.0, which the library normalizes as unassigned"""
    return ("Cafe\u0301 caf\u00e9 A\u030a \u00c5 \u212b \u2126 \u1100\u1161\u11a8 \uac01 "
            "q\u0307\u0323 q\u0323\u0307 \u1e9b\u0323 \u0958 \u0915\u093c \ufb01 x\u00b2 "
            "\uff26\uff55\uff4c\uff4c \u00bd \u337f \u00a0\u3000| \ud55c\uad6d\uc5b4 "
            "\u1112\u1161\u11ab e\u0301\u1df6 e\u1df6\u0301 a\u07fd\u0301 \u0628\u0898\u064e "
            "\U00011935\U00011930 \U00011938 \u32ff \ua7f2 o\u0308\u0304 \u01d5 \u0390\n")


def template(tok):
    """The ids the post-processor puts before a text (none of these tokenizers puts any
    after one)"""
    return {"pre": tok.encode("").ids, "post": []}


def row(tok, tname, raw):
    s = raw.decode("utf-8", errors="replace")
    ids = tok.encode(s).ids
    ids_ns = tok.encode(s, add_special_tokens=False).ids
    dec = tok.decode(ids, skip_special_tokens=False).encode("utf-8").hex()
    skip = tok.decode(ids, skip_special_tokens=True).encode("utf-8").hex()
    t = template(tok)
    # "=": the text itself; ids "+": the template's around ids_nospecial (a smaller file)
    return {"name": tname, "ids": "+" if ids == t["pre"] + ids_ns + t["post"] else ids,
            "ids_nospecial": ids_ns, "decode": "=" if dec == raw.hex() else dec,
            "decode_skip": "=" if skip == raw.hex() else skip}


def partial_bytes(tok, byte_fallback):
    """ids that decode to bytes that are not UTF-8 (half a character)"""
    vocab = tok.get_vocab()
    if byte_fallback:
        part = [vocab["<0xE2>"], vocab["<0x82>"], vocab["▁a"] if "▁a" in vocab else 300,
                vocab["<0xF0>"]]
    else:
        part = [vocab["â"], vocab["Ĥ"], vocab["a"], vocab["ð"]]
    return {"name": "partial_bytes", "ids": part, "ids_nospecial": part,
            "decode": tok.decode(part, skip_special_tokens=False).encode("utf-8").hex(),
            "decode_skip": tok.decode(part).encode("utf-8").hex()}


def dump(cases, path):
    """cases.json with a row on a line"""
    with open(path, "w") as f:
        f.write('{\n"texts": [\n')
        f.write(",\n".join(json.dumps(t) for t in cases["texts"]))
        f.write('\n],\n"templates": ' + json.dumps(cases["templates"]))
        f.write(',\n"tokenizers": {\n')
        f.write(",\n".join(json.dumps(k) + ": [\n" + ",\n".join(
            json.dumps(r, separators=(",", ":")) for r in rows) + "\n]"
            for k, rows in cases["tokenizers"].items()))
        f.write('\n},\n"variants": [\n')
        f.write(",\n".join("{" + json.dumps("name") + ": " + json.dumps(v["name"]) +
                           ', "base": ' + json.dumps(v["base"]) +
                           ', "replace": ' + json.dumps(v["replace"], ensure_ascii=False) +
                           ', "rows": [\n' + ",\n".join(
                               json.dumps(r, separators=(",", ":")) for r in v["rows"]) + "\n]}"
                           for v in cases["variants"]))
        f.write("\n],\n" + '"versions": ' + json.dumps(cases["versions"]) + "\n}\n")


def check():
    """Every row of cases.json again, from the committed files, with this tokenizers"""
    with open(os.path.join(HERE, "cases.json"), encoding="utf-8") as f:
        cases = json.load(f)
    by_name = {t["name"]: bytes.fromhex(t["hex"]) for t in cases["texts"]}
    runs = [(k, Tokenizer.from_file(os.path.join(HERE, k + ".json")), rows)
            for k, rows in cases["tokenizers"].items()]
    for v in cases["variants"]:
        with open(os.path.join(HERE, v["base"] + ".json"), encoding="utf-8") as f:
            obj = json.load(f)
        obj.update(v["replace"])
        runs.append((v["name"], Tokenizer.from_str(json.dumps(obj)), v["rows"]))
    wrong = checked = 0
    for name, tok, rows in runs:
        for r in rows:
            if r["name"] == "partial_bytes":
                continue
            checked += 1
            if row(tok, r["name"], by_name[r["name"]]) != r:
                wrong += 1
                print(f"{name} {r['name']}: differs")
    print(f"tokenizers {tokenizers.__version__}: {checked - wrong} of {checked} rows as "
          f"committed (made with {cases['versions']})")
    return 1 if wrong else 0


def main():
    if sys.argv[1:] == ["--check"]:
        return check()
    tf = transformers4()
    work = tempfile.mkdtemp(prefix="tokgen.")
    model = spm_model(work)
    made = {"qwen2": qwen2(work), "mistral": llama(work, model, False),
            "llama2": llama(work, model, True)}
    toks = {"gpt2": gpt2(), "llama3": llama3(), "sp": sp()}
    for name, tok in toks.items():
        tok.save(os.path.join(HERE, name + ".json"), pretty=False)
    for name, path in made.items():  # as transformers wrote it, made compact
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
        with open(os.path.join(HERE, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
    shutil.rmtree(work)
    for name in list(toks) + list(made):
        # what was saved is what is tested
        toks[name] = Tokenizer.from_file(os.path.join(HERE, name + ".json"))
        size = os.path.getsize(os.path.join(HERE, name + ".json"))
        print(f"{name}.json: {toks[name].get_vocab_size()} tokens, {size} bytes")
    cases = {"texts": [], "templates": {k: template(t) for k, t in toks.items()},
             "tokenizers": {}, "variants": [],
             "versions": {"tokenizers": tokenizers.__version__, "transformers": tf.__version__}}
    for tname, raw in texts():
        cases["texts"].append({"name": tname, "hex": raw.hex()})
    for name, tok in toks.items():
        rows = [row(tok, tname, raw) for tname, raw in texts()]
        rows.append(partial_bytes(tok, name in ("sp", "mistral", "llama2")))
        cases["tokenizers"][name] = rows
    by_name = dict(texts())
    for vname, base, replace in VARIANTS:
        with open(os.path.join(HERE, base + ".json"), encoding="utf-8") as f:
            obj = json.load(f)
        obj.update(replace)
        tok = Tokenizer.from_str(json.dumps(obj))
        cases["variants"].append({"name": vname, "base": base, "replace": replace,
                                  "rows": [row(tok, t, by_name[t]) for t in VARIANT_TEXTS]})
    dump(cases, os.path.join(HERE, "cases.json"))
    json.load(open(os.path.join(HERE, "cases.json")))  # it parses
    print("wrote", os.path.join(HERE, "cases.json"))


if __name__ == "__main__":
    sys.exit(main())
