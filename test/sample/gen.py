#!/usr/bin/env python3
"""test/sample/gen.py — the goldens of test/sample.sh: transformers' greedy continuations
(generate(do_sample=False)) of small random models, once (the files are committed; make
test runs no Python):

    pip install torch transformers safetensors     # CPU is enough
    python3 test/sample/gen.py                     # rewrites test/sample/greedy.txt and
                                                   # test/sample/llama_tok/

Made with torch 2.15.0, transformers 5.24.0, safetensors 0.8.0.

The models are test/hf's (test/hf/gen_gpt2.py, gen_llama.py: random fp32 weights, vocabulary
256): gpt2 (eos_token_id 255, so generate stops there), llama3 (grouped-query attention,
2 kv heads of 4, Llama 3's RoPE scaling, untied), llama_mqa (one kv head, tied), qwen2
(q/k/v biases) and mistral; and one made here, llama_tok/: LlamaForCausalLM with the
vocabulary of test/tok/llama3.json (800 ids: that tokenizer, trained by test/tok/gen.py
in Llama 3's kind, puts <|begin_of_text|> first), 2 layers, tied, its weights drawn as
test/hf's are (seed 27).

greedy.txt, one line per case: "NAME MAX_NEW PROMPT_IDS NEW_IDS MARGIN [EOS]", the ids
comma-separated, NEW_IDS what generate added (an end-of-text id included where it
stopped: gpt2's 255 is never chosen in these, so one case passes eos_token_id=EOS to
generate, 78, which it meets on the way), MARGIN the smallest gap between the largest and
the second largest logit over the steps (a gap far above fp32 rounding: pptrain's greedy
choice cannot flip on an ulp).
A case whose gap is below 1e-3 is not written (its prompt is replaced by the next draw).
Text cases, "text NAME MAX_NEW PROMPT_HEX NEW_IDS MARGIN OUTPUT_HEX": the prompt text,
encoded by tokenizer(text) as generate is given it, and the decode of prompt and new ids
with skip_special_tokens=True: what `pptrain sample --prompt TEXT` prints (before its
newline).
"""
import os
import shutil

import torch
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM,
                          PreTrainedTokenizerFast)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HF = os.path.join(ROOT, "test", "hf")
MIN_GAP = 1e-3


def greedy(model, ids, max_new, **kw):
    """generate's greedy ids after the prompt, and the smallest top-1 / top-2 logit gap."""
    x = torch.tensor([ids])
    out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False,
                         max_new_tokens=max_new, return_dict_in_generate=True,
                         output_logits=True, pad_token_id=0, **kw)
    new = out.sequences[0, len(ids):].tolist()
    gap = min((l[0].topk(2).values[0] - l[0].topk(2).values[1]).item() for l in out.logits)
    return new, gap


def make_llama_tok():
    """llama_tok/: a LlamaForCausalLM of test/tok/llama3.json's vocabulary."""
    d = os.path.join(HERE, "llama_tok")
    shutil.rmtree(d, ignore_errors=True)
    cfg = LlamaConfig(vocab_size=800, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=64, num_hidden_layers=2, max_position_embeddings=128,
                      rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=0,
                      eos_token_id=None, hidden_act="silu", attn_implementation="eager",
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    torch.manual_seed(27)
    model = LlamaForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.08 * torch.randn_like(p))
    model.save_pretrained(d)
    return d


def main():
    lines = []
    gen = torch.Generator().manual_seed(5)
    for name in ["gpt2", "llama3", "llama_mqa", "qwen2", "mistral"]:
        model = AutoModelForCausalLM.from_pretrained(os.path.join(HF, name),
                                                     dtype=torch.float32).eval()
        written = 0
        for n, max_new in [(1, 24), (5, 24), (17, 30)]:
            while True:
                ids = torch.randint(0, 256, (n,), generator=gen).tolist()
                new, gap = greedy(model, ids, max_new)
                if gap >= MIN_GAP:
                    break
                print("%s: prompt %s: gap %.2g, drawing another" % (name, ids, gap))
            lines.append("%s %d %s %s %.3g" % (name, max_new, ",".join(map(str, ids)),
                                               ",".join(map(str, new)), gap))
            written += 1
        if name == "gpt2":  # an end-of-text id met on the way: generate stops after it
            new, gap = greedy(model, ids, max_new, eos_token_id=78)
            assert new[-1] == 78 and len(new) < max_new and gap >= MIN_GAP, new
            lines.append("%s %d %s %s %.3g 78" % (name, max_new, ",".join(map(str, ids)),
                                                  ",".join(map(str, new)), gap))
    d = make_llama_tok()
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(ROOT, "test/tok/llama3.json"))
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    for text, max_new in [("The cat sat", 20), ("Ünïcödé 漢字 and 42 digits", 16)]:
        ids = tok(text)["input_ids"]
        new, gap = greedy(model, ids, max_new)
        assert gap >= MIN_GAP, (text, gap)
        out = tok.decode(ids + new, skip_special_tokens=True)
        lines.append("text llama_tok %d %s %s %.3g %s" % (
            max_new, text.encode().hex(), ",".join(map(str, new)), gap, out.encode().hex()))
    with open(os.path.join(HERE, "greedy.txt"), "w") as f:
        f.write("# test/sample/gen.py: transformers' generate(do_sample=False), see there\n")
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
