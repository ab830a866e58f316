#!/usr/bin/env python3
"""test/tok/gen.py — the goldens of test/test_tok.c, made with the Hugging Face tokenizers
library. Run by hand from the repository root (`pip install tokenizers`, then
`python3 test/tok/gen.py`); make test only reads what it wrote and never needs Python.

It trains three tiny tokenizers on data/tiny.txt plus hard.txt (vocabularies of a few
hundred tokens, so each tokenizer.json stays small) and writes:

  gpt2.json    GPT-2's kind: the ByteLevel pre-tokenizer with GPT-2's regex, the ByteLevel
               decoder and post-processor, <|endoftext|> special
  llama3.json  Llama 3's kind: Split with Llama 3's regex then ByteLevel without its regex,
               ignore_merges, a TemplateProcessing post-processor that puts
               <|begin_of_text|> first, a few special tokens
  sp.json      SentencePiece's kind as Llama 2's tokenizer.json has it: the normalizer
               Prepend("▁") + Replace(" " -> "▁"), no pre-tokenizer, BPE with byte_fallback
               (<0x00>..<0xFF> in the vocabulary), unk <unk>, fuse_unk, the decoder
               Replace/ByteFallback/Fuse/Strip, <s> first by the template
  cases.json   the test texts (as hex: some are not valid UTF-8) and, for each tokenizer,
               the ids of encode(text) and encode(text, add_special_tokens=False), and the
               decodes of those ids with and without skip_special_tokens (as hex, "=" where
               it is the text itself)

The tokenizers library takes Python str (Rust &str): a text that is not valid UTF-8 is
given to it as bytes.decode("utf-8", errors="replace"), each maximal ill-formed
subsequence one U+FFFD, which is the contract of tok_encode for such bytes.
"""
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

GPT2_RE = None  # the ByteLevel pre-tokenizer's own (use_regex=True)
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
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
    ]
    return out


def main():
    toks = {"gpt2": gpt2(), "llama3": llama3(), "sp": sp()}
    for name, tok in toks.items():
        tok.save(os.path.join(HERE, name + ".json"), pretty=False)
        size = os.path.getsize(os.path.join(HERE, name + ".json"))
        print(f"{name}.json: {tok.get_vocab_size()} tokens, {size} bytes")
        # what was saved is what is tested
        toks[name] = Tokenizer.from_file(os.path.join(HERE, name + ".json"))
    cases = {"texts": [], "tokenizers": {}}
    for tname, raw in texts():
        cases["texts"].append({"name": tname, "hex": raw.hex()})
    for name, tok in toks.items():
        rows = []
        for tname, raw in texts():
            s = raw.decode("utf-8", errors="replace")
            ids = tok.encode(s).ids
            ids_ns = tok.encode(s, add_special_tokens=False).ids
            dec = tok.decode(ids, skip_special_tokens=False).encode("utf-8").hex()
            skip = tok.decode(ids, skip_special_tokens=True).encode("utf-8").hex()
            # "=": the text itself (keeps the file small)
            rows.append({"name": tname, "ids": ids, "ids_nospecial": ids_ns,
                         "decode": "=" if dec == raw.hex() else dec,
                         "decode_skip": "=" if skip == raw.hex() else skip})
        # ids that decode to bytes that are not UTF-8 (half a character)
        vocab = tok.get_vocab()
        if name == "sp":
            part = [vocab["<0xE2>"], vocab["<0x82>"], vocab["▁a"] if "▁a" in vocab else 300,
                    vocab["<0xF0>"]]
        else:
            part = [vocab["â"], vocab["Ĥ"], vocab["a"], vocab["ð"]]
        rows.append({"name": "partial_bytes", "ids": part, "ids_nospecial": part,
                     "decode": tok.decode(part, skip_special_tokens=False).encode("utf-8").hex(),
                     "decode_skip": tok.decode(part).encode("utf-8").hex()})
        cases["tokenizers"][name] = rows
    with open(os.path.join(HERE, "cases.json"), "w") as f:
        json.dump(cases, f, indent=0, separators=(",", ":"))
        f.write("\n")
    print("wrote", os.path.join(HERE, "cases.json"))


if __name__ == "__main__":
    sys.exit(main())
