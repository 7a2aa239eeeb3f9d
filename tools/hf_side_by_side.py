#!/usr/bin/env python3
"""Hugging Face transformers on the same shape, for the side-by-side rows of the GPU
benchmarks (bench/cuda_models.sh runs it where PyTorch is installed).

The model is built from config.json alone with random bf16 weights on the GPU (as
hearth's --load-format dummy), then:
  batch 1: greedy `generate` of --tokens new tokens after a 4-token prompt; decode
           tokens/s from the time of N tokens less the time of 1 (the prefill);
  batch B: greedy `generate` of --tokens new tokens for --decode-batch (32) prompts of
           --prompt random tokens each (0: skipped); decode tokens/s, B (N - 1) over the
           time of N tokens less the time of 1, as at batch 1;
  batched: `generate_batch` (continuous batching) of --requests prompts of --prompt
           random tokens, --output new tokens each; generated tokens/s.
JSON on stdout; a part that fails reports null and its error.

  python3 tools/hf_side_by_side.py --model DIR [--tokens 32] [--decode-batch 32]
                                   [--requests 64 --prompt 512 --output 128]
"""
import argparse
import json
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def build(model_dir):
    cfg = AutoConfig.from_pretrained(model_dir)
    kw = {}
    try:
        cfg.experts_implementation = "grouped_mm"  # transformers 5's fast MoE path, where it exists
    except Exception:
        pass
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, **kw)
        except TypeError:
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16, **kw)
    return model.eval(), cfg


def timed_generate(model, ids, n):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out.shape[1] - ids.shape[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--decode-batch", type=int, default=32)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--output", type=int, default=128)
    a = ap.parse_args()
    res = {"transformers": None, "batch1_decode_tok_s": None, "batchB_decode_tok_s": None,
           "batch_generated_tok_s": None}
    import transformers

    res["transformers"] = transformers.__version__
    t0 = time.perf_counter()
    model, cfg = build(a.model)
    res["build_s"] = round(time.perf_counter() - t0, 1)
    g = torch.Generator().manual_seed(5)
    try:
        ids = torch.randint(0, cfg.vocab_size, (1, 4), generator=g).cuda()
        timed_generate(model, ids, 2)  # warm-up
        t1, _ = timed_generate(model, ids, 1)
        tn, n = timed_generate(model, ids, a.tokens)
        res["batch1_decode_tok_s"] = round((n - 1) / (tn - t1), 2)
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        res["batch1_error"] = repr(e)[:300]
    if a.decode_batch > 0:
        try:
            ids = torch.randint(0, cfg.vocab_size, (a.decode_batch, a.prompt), generator=g).cuda()
            t1, _ = timed_generate(model, ids, 1)
            tn, n = timed_generate(model, ids, a.tokens)
            res["batchB"] = a.decode_batch
            res["batchB_decode_tok_s"] = round(a.decode_batch * (n - 1) / (tn - t1), 2)
        except Exception as e:  # noqa: BLE001
            res["batchB_error"] = repr(e)[:300]
    try:
        from transformers.generation import GenerationConfig

        prompts = [torch.randint(0, cfg.vocab_size, (a.prompt,), generator=g).tolist() for _ in range(a.requests)]
        gc = GenerationConfig(max_new_tokens=a.output, do_sample=False)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate_batch(inputs=prompts, generation_config=gc, progress_bar=False)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        gen = sum(len(getattr(r, "generated_tokens", []) or []) for r in out.values())
        res["batch_requests"] = a.requests
        res["batch_generated_tokens"] = gen
        res["batch_seconds"] = round(dt, 2)
        res["batch_generated_tok_s"] = round(gen / dt, 2)
    except Exception as e:  # noqa: BLE001
        res["batch_error"] = repr(e)[:300]
    print(json.dumps(res))


if __name__ == "__main__":
    main()
