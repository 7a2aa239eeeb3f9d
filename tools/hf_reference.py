#!/usr/bin/env python3
"""Reference logits of a Qwen3 checkpoint from Hugging Face transformers, in the format
`hearth eval --expected` reads (tests/data/fixtures/README.md): for prompts p0..pN
(random token ids of the given lengths, fixed seed), pN.input_ids, pN.logits (float64
forward, eager attention, rounded to float32), pN.greedy and pN.greedy_margin.

Run where PyTorch and transformers are installed (the GPU machine):
  python3 tools/hf_reference.py --model DIR --out expected.safetensors [--lengths 1,7,33,70]
"""
import argparse

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--lengths", default="1,7,33,70")
    ap.add_argument("--greedy", type=int, default=12)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    kw = dict(dtype=torch.float64, attn_implementation="eager")
    try:  # transformers 5 runs MoE experts through grouped_mm by default, which has no float64
        model = AutoModelForCausalLM.from_pretrained(a.model, experts_implementation="eager", **kw)
    except (TypeError, ValueError):
        model = AutoModelForCausalLM.from_pretrained(a.model, **kw)
    model = model.to(a.device).eval()
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(1234)
    out = {}
    with torch.no_grad():
        for i, n in enumerate(int(x) for x in a.lengths.split(",")):
            ids = torch.randint(0, vocab, (n,), generator=g, dtype=torch.int64)
            logits = model(ids[None].to(a.device)).logits[0]
            out[f"p{i}.input_ids"] = ids.to(torch.int32)
            out[f"p{i}.logits"] = logits.to(torch.float32).cpu()
            seq, greedy, margin = ids.clone(), [], []
            last = logits[-1]
            for _ in range(a.greedy):
                top2 = torch.topk(last, 2)
                tok = int(top2.indices[0])
                greedy.append(tok)
                margin.append(float(top2.values[0] - top2.values[1]))
                seq = torch.cat([seq, torch.tensor([tok])])
                last = model(seq[None].to(a.device)).logits[0, -1]
            out[f"p{i}.greedy"] = torch.tensor(greedy, dtype=torch.int32)
            out[f"p{i}.greedy_margin"] = torch.tensor(margin, dtype=torch.float32)
    save_file(out, a.out)


if __name__ == "__main__":
    main()
