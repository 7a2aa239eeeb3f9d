#!/usr/bin/env python3
"""Trains hearth's demo model: a small Qwen3ForCausalLM on the fortunes of the Debian
package `fortunes` (BSD licence), with a byte-level BPE tokenizer in Qwen3's form and
ChatML chat turns mixed in, then writes a Hugging Face checkpoint directory:

  config.json  generation_config.json  model.safetensors (bf16, tied embeddings)
  tokenizer.json  tokenizer_config.json (ChatML chat_template)
  expected.safetensors  (reference logits for `hearth eval`: transformers, float64,
                         eager attention, on the bf16 weights as written)
  training_log.txt  summary.json

Needs PyTorch, transformers (5.x) and tokenizers, and a CUDA GPU (--device cpu is meant
for --smoke, but was never tried).  The corpus comes from tools/train_demo_prepare.sh; the
defaults are the configuration of models/fortune-demo; tools/train_demo_gpu.sh wraps this.

  python3 tools/train_demo.py --out /tmp/fortune-demo
  python3 tools/train_demo.py --smoke --out /tmp/smoke     # 6 steps: checks the pipeline
"""
import argparse
import collections
import hashlib
import json
import math
import os
import random
import re
import sys
import time

# ----------------------------------------------------------------------------- tokenizer form

# Qwen3's tokenizer.json components, field for field: NFC, the Split regex of Qwen2/Qwen3,
# ByteLevel without its own regex, and the ByteLevel post-processor and decoder.
QWEN3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
BYTE_LEVEL = {"add_prefix_space": False, "trim_offsets": False, "use_regex": False}
QWEN3_FORM = {
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN3_SPLIT}, "behavior": "Isolated", "invert": False},
        dict(type="ByteLevel", **BYTE_LEVEL)]},
    "post_processor": dict(type="ByteLevel", **BYTE_LEVEL),
    "decoder": dict(type="ByteLevel", **BYTE_LEVEL),
}
EOT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"

# ChatML, as Qwen3 renders a conversation without tools or thinking.
CHAT_TEMPLATE = (
    "{%- for message in messages %}\n"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n")


def render_chat(messages, add_generation_prompt=False):
    """What CHAT_TEMPLATE renders (checked against jinja2 when it is installed)."""
    s = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
    return s + (f"{IM_START}assistant\n" if add_generation_prompt else "")


def train_tokenizer(texts, vocab_size):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    # The three special tokens come after the merges, as in Qwen3 (ids n_bpe .. n_bpe+2).
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - 3, min_frequency=2, show_progress=False,
                                  special_tokens=[], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_special_tokens([AddedToken(t, single_word=False, lstrip=False, rstrip=False, normalized=False,
                                       special=True) for t in (EOT, IM_START, IM_END)])
    # Pin every component to Qwen3's exact JSON, whatever this version writes by default.
    j = json.loads(tok.to_str())
    j.update(json.loads(json.dumps(QWEN3_FORM)))
    j["model"]["dropout"] = None
    j["model"]["unk_token"] = None
    j["model"]["byte_fallback"] = False
    j["model"]["continuing_subword_prefix"] = ""
    j["model"]["end_of_word_suffix"] = ""
    return Tokenizer.from_str(json.dumps(j, ensure_ascii=False))


def tokenizer_config(tok):
    ids = {t: tok.token_to_id(t) for t in (EOT, IM_START, IM_END)}
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {str(ids[t]): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                               "single_word": False, "special": True} for t in (EOT, IM_START, IM_END)},
        "additional_special_tokens": [IM_START, IM_END],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": IM_END,
        "errors": "replace",
        "model_max_length": None,  # filled by the caller
        "pad_token": EOT,
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


# ----------------------------------------------------------------------------- data

STOP = set("""
about above after again against almost along already also although always among another anyone
anything anyway around away back because become been before being below best better between both
cannot could does doing done down during each either else enough even ever every everything from
further gets give given going gone good great have having here hers herself himself into itself
just keep know knew last least less like little long look made make many might more most much must
myself need neither never next none nothing often once only other others ought ours ourselves over
perhaps please quite rather really same said says seem shall should since some someone something
still such sure take than that their theirs them themselves then there these they thing things
think this those though through thus till together told took under until upon used very want wants
well went were what whatever when where whether which while whom whose will with within without
would year years your yours yourself yourselves the and you not but for are was his her him she
who why how all any can did had has its may now off one our out own say see too two use way yes yet
get got let put set new old big men man""".split())
DETERMINERS = set("the a an my your his her its our their this that these those of no some any every".split())

USER_TOPIC = ["{w}", "{w}?", "{W}.", "Tell me something about {w}.", "Give me a fortune about {w}.",
              "What do you know about {w}?", "Say something about {w}.", "A fortune about {w}, please.",
              "Do you have a saying about {w}?", "I'd like to hear about {w}.", "What about {w}?",
              "Any wisdom about {w}?", "Talk to me about {w}.", "Quote something about {w}."]
USER_ANY = ["Tell me a fortune.", "Say something.", "Hello!", "Give me some wisdom.", "Make me laugh.",
            "Fortune, please.", "Hi", "What's my fortune?", "Tell me something.", "Surprise me."]
SYSTEMS = ["You are a fortune cookie.", "You are a helpful assistant.", "Answer with a fortune.",
           "You are a wise old computer."]
WORD = re.compile(r"[A-Za-z]+")
EARLY_WORDS, EARLY_SHARE = 12, 0.8


def load_corpus(path, heldout_permille):
    """Fortunes, deduplicated; a fortune is held out when a hash of its text says so."""
    seen, train, val = set(), [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            text = json.loads(line)["text"]
            if text in seen:
                continue
            seen.add(text)
            h = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
            (val if h % 1000 < heldout_permille else train).append(text)
    return train, val


class Topics:
    """Topic words a user may name: noun-like words (often after a determiner, plurals of
    those, or names) of 3+ letters found in 3..2000 training fortunes."""

    def __init__(self, texts):
        self.df, forms = collections.Counter(), collections.Counter()
        total, after_det = collections.Counter(), collections.Counter()
        for t in texts:
            ws = WORD.findall(t)
            forms.update(ws)
            self.df.update({w.lower() for w in ws})
            for i, w in enumerate(ws):
                total[w.lower()] += 1
                if i and ws[i - 1].lower() in DETERMINERS:
                    after_det[w.lower()] += 1
        self.display = {}
        for w, _ in forms.most_common():
            k = w.lower()
            if k not in self.display:
                self.display[k] = k if forms[k] else w  # names keep their capital

        def nounish(k):
            return after_det[k] >= 1 and after_det[k] >= 0.1 * total[k]

        self.ok = {k for k in self.df
                   if len(k) >= 3 and k not in STOP and 3 <= self.df[k] <= 2000
                   and (nounish(k) or (k.endswith("s") and nounish(k[:-1])) or self.display[k][0].isupper())}
        self.cache = {}

    def candidates(self, text):
        """(all topic words of text, those among its first EARLY_WORDS words)"""
        c = self.cache.get(text)
        if c is None:
            ws = [w.lower() for w in WORD.findall(text)]
            c = self.cache[text] = (sorted(set(ws) & self.ok), sorted(set(ws[:EARLY_WORDS]) & self.ok))
        return c

    def conversation_turn(self, text, rng):
        # Mostly a word from the opening of the fortune: a small model learns to take up
        # the user's word when the answer does so early.
        c, early = self.candidates(text)
        if early and rng.random() < EARLY_SHARE:
            c = early
        if c and rng.random() < 0.95:
            w = self.display[rng.choice(c)]
            user = rng.choice(USER_TOPIC).format(w=w, W=w[:1].upper() + w[1:])
        else:
            user = rng.choice(USER_ANY)
        return [{"role": "user", "content": user}, {"role": "assistant", "content": text}]


def make_conversations(texts, topics, rng):
    """One conversation per fortune: sometimes after a system prompt or an earlier turn."""
    out = []
    for t in texts:
        msgs = []
        if rng.random() < 0.15:
            msgs.append({"role": "system", "content": rng.choice(SYSTEMS)})
        if rng.random() < 0.2:
            msgs += topics.conversation_turn(rng.choice(texts), rng)
        msgs += topics.conversation_turn(t, rng)
        out.append(render_chat(msgs))
    return out


def pack(docs, seq, pad_id):
    """Whole documents into rows of seq tokens, each row starting at a document; labels are
    the next token (-100 at padding and at each row's last token)."""
    import torch
    rows, cur = [], []
    for d in docs:
        d = d[:seq]
        if cur and len(cur) + len(d) > seq:
            rows.append(cur)
            cur = []
        cur.extend(d)
    if cur:
        rows.append(cur)
    x = torch.full((len(rows), seq), pad_id, dtype=torch.long)
    y = torch.full((len(rows), seq), -100, dtype=torch.long)
    for i, r in enumerate(rows):
        t = torch.tensor(r, dtype=torch.long)
        x[i, :len(r)] = t
        y[i, :len(r) - 1] = t[1:]
    return x, y


# ----------------------------------------------------------------------------- model

def dropout_hook(p):
    """Residual-branch dropout during training only; the architecture stays Qwen3's."""
    import torch.nn.functional as F

    def hook(mod, args, out):
        if not mod.training or p <= 0:
            return None
        if isinstance(out, tuple):
            return (F.dropout(out[0], p, True),) + tuple(out[1:])
        return F.dropout(out, p, True)
    return hook


def score(model, docs, device, autocast, batch=64):
    """Summed NLL (nats) and the number of predicted tokens; each doc scored on its own."""
    import torch
    import torch.nn.functional as F
    model.eval()
    docs = sorted(docs, key=len)
    nll, n = 0.0, 0
    for b in range(0, len(docs), batch):
        chunk = docs[b:b + batch]
        L = max(len(d) for d in chunk)
        x = torch.zeros((len(chunk), L), dtype=torch.long)
        y = torch.full((len(chunk), L), -100, dtype=torch.long)
        for i, d in enumerate(chunk):
            x[i, :len(d)] = torch.tensor(d)
            y[i, :len(d)] = torch.tensor(d)
        x, y = x.to(device), y.to(device)
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=x, use_cache=False).logits
        lg = logits[:, :-1].float().reshape(-1, logits.shape[-1])
        tgt = y[:, 1:].reshape(-1)
        nll += F.cross_entropy(lg, tgt, ignore_index=-100, reduction="sum").item()
        n += int((tgt != -100).sum().item())
    return nll, n


# ----------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="tools/train_demo_data/fortunes.jsonl")
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=4096, help="BPE tokens + 3 special tokens")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=768)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--seq", type=int, default=1024, help="training rows and max_position_embeddings")
    ap.add_argument("--batch", type=int, default=32, help="rows per step")
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--dropout", type=float, default=0.2)
    ap.add_argument("--heldout-permille", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--time-budget", type=float, default=600, help="seconds of training at most")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--smoke", action="store_true", help="a few hundred docs and steps: checks the pipeline")
    a = ap.parse_args()
    if a.smoke:
        a.steps, a.eval_every, a.warmup, a.batch = 6, 3, 2, 4

    os.makedirs(a.out, exist_ok=True)
    log_lines = []

    def log(*parts):
        s = " ".join(str(p) for p in parts)
        print(s, flush=True)
        log_lines.append(s)

    import tokenizers
    import torch
    import torch.nn.functional as F
    import transformers
    from transformers import Qwen3Config, Qwen3ForCausalLM
    versions = f"transformers {transformers.__version__} torch {torch.__version__} tokenizers {tokenizers.__version__}"
    log("args", json.dumps(vars(a), sort_keys=True))
    log(versions)
    random.seed(a.seed)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    device = torch.device(a.device)
    use_amp = device.type == "cuda"

    # --- data and tokenizer
    train_txt, val_txt = load_corpus(a.data, a.heldout_permille)
    if a.smoke:
        train_txt, val_txt = train_txt[:300], val_txt[:40]
    log(f"fortunes: {len(train_txt)} train, {len(val_txt)} held out "
        f"({sum(len(t.encode()) for t in val_txt)} bytes held out)")
    t0 = time.time()
    tok = train_tokenizer(train_txt, a.vocab)
    eot, ims, ime = (tok.token_to_id(t) for t in (EOT, IM_START, IM_END))
    n_tok = tok.get_vocab_size()
    vocab = (n_tok + 63) // 64 * 64
    log(f"tokenizer: {n_tok} tokens ({eot} {ims} {ime} special), model vocab {vocab}, {time.time() - t0:.1f}s")
    tok.save(os.path.join(a.out, "tokenizer.json"))
    tcfg = tokenizer_config(tok)
    tcfg["model_max_length"] = a.seq
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump(tcfg, f, indent=2, ensure_ascii=False)
    try:  # the template renders what training used
        import jinja2
        conv = [{"role": "system", "content": "S"}, {"role": "user", "content": "U\tx"},
                {"role": "assistant", "content": "A\n b"}, {"role": "user", "content": "V"}]
        t = jinja2.Environment().from_string(CHAT_TEMPLATE)
        for gen in (False, True):
            assert t.render(messages=conv, add_generation_prompt=gen) == render_chat(conv, gen)
        log("chat template: jinja2 renders the training format")
    except ImportError:
        log("chat template: jinja2 missing, not checked")

    def enc(texts):
        return [e.ids for e in tok.encode_batch(texts)]

    plain_train = [ids + [eot] for ids in enc(train_txt)]
    val_plain = [[eot] + ids + [eot] for ids in enc(val_txt)]
    topics_train = Topics(train_txt)
    val_chat = enc(make_conversations(val_txt, topics_train, random.Random(a.seed + 1)))
    n_plain = sum(len(d) for d in plain_train)
    log(f"train plain tokens {n_plain}, held-out plain tokens {sum(len(d) - 1 for d in val_plain)}")

    # --- model
    cfg = Qwen3Config(
        vocab_size=vocab, hidden_size=a.hidden, intermediate_size=a.ffn, num_hidden_layers=a.layers,
        num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, head_dim=a.head_dim,
        max_position_embeddings=a.seq, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": a.rope_theta},
        attention_bias=False, attention_dropout=0.0, use_sliding_window=False,
        bos_token_id=None, eos_token_id=ime, pad_token_id=eot)
    got = cfg.to_dict()
    theta = (got.get("rope_parameters") or {}).get("rope_theta", got.get("rope_theta"))
    if theta != a.rope_theta:
        sys.exit(f"this transformers did not take rope_theta {a.rope_theta} (config has {theta})")
    model = Qwen3ForCausalLM(cfg).to(device)
    if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        sys.exit("lm_head is not tied to the embeddings")
    for layer in model.model.layers:
        layer.self_attn.register_forward_hook(dropout_hook(a.dropout))
        layer.mlp.register_forward_hook(dropout_hook(a.dropout))
    model.model.embed_tokens.register_forward_hook(dropout_hook(a.dropout))
    n_params = sum(p.numel() for p in model.parameters())  # tied: counted once
    log(f"model: {a.layers} layers, hidden {a.hidden}, ffn {a.ffn}, heads {a.heads}/{a.kv_heads}x{a.head_dim}, "
        f"{n_params} parameters")
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)

    # --- training
    total = a.steps
    step, epoch, best, best_state = 0, 0, float("inf"), None
    t_train = time.time()
    t_mark = None
    curve = []

    def lr_at(s):
        if s < a.warmup:
            return a.lr * (s + 1) / a.warmup
        p = min(1.0, (s - a.warmup) / max(1, total - a.warmup))
        return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))

    def validate():
        nonlocal best, best_state
        nll, n = score(model, val_plain, device, use_amp)
        v = nll / n
        curve.append((step, v))
        tag = ""
        if v < best:
            best = v
            best_state = {k: t.detach().to("cpu", copy=True) for k, t in model.state_dict().items()}
            tag = " best"
        log(f"step {step}/{total} epoch {epoch} val_loss {v:.4f} ppl {math.exp(v):.2f} "
            f"({time.time() - t_train:.0f}s){tag}")
        model.train()

    model.train()
    while step < total:
        convs = enc(make_conversations(train_txt, topics_train, rng))
        docs = plain_train + convs
        rng.shuffle(docs)
        x_all, y_all = pack(docs, a.seq, eot)
        if epoch == 0:
            log(f"epoch rows {x_all.shape[0]}, tokens {int((y_all != -100).sum())} "
                f"({sum(len(c) for c in convs)} in conversations)")
        perm = torch.randperm(x_all.shape[0])
        for b in range(0, x_all.shape[0] - a.batch + 1, a.batch):
            idx = perm[b:b + a.batch]
            x, y = x_all[idx].to(device, non_blocking=True), y_all[idx].to(device, non_blocking=True)
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp):
                logits = model(input_ids=x, use_cache=False).logits
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            if step % 25 == 0:
                log(f"step {step} loss {loss.item():.4f} lr {lr_at(step):.2e}")
            # Fit the run into the time budget: shorten the schedule early, never mid-decay.
            if step == 10:
                t_mark = time.time()
            if step == 40 and t_mark is not None:
                per = (time.time() - t_mark) / 30 * 1.15
                fit = step + int((a.time_budget - (time.time() - t_train)) / per)
                if fit < total:
                    log(f"time budget: {per * 1000:.0f} ms/step, steps {total} -> {fit}")
                    total = max(fit, step + 1)
            if step % a.eval_every == 0 or step >= total:
                validate()
            if step >= total or time.time() - t_train > a.time_budget * 1.5:
                total = step
                break
        epoch += 1
    if not curve or curve[-1][0] != step:
        validate()
    log(f"training done: {step} steps, {epoch} epochs, {time.time() - t_train:.0f}s, best val_loss {best:.4f}")

    # --- ship the best weights in bf16
    model.load_state_dict(best_state)
    model.eval()
    model.to(torch.bfloat16)
    model.save_pretrained(a.out)
    gen = {"bos_token_id": None, "eos_token_id": [ime, eot], "pad_token_id": eot, "do_sample": True,
           "temperature": 0.8, "top_k": 40, "top_p": 0.95, "transformers_version": transformers.__version__}
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
    for fn in os.listdir(a.out):
        log(f"wrote {fn} {os.path.getsize(os.path.join(a.out, fn))} bytes")
    del model, opt, best_state

    # --- held-out perplexity of the weights as shipped (bf16 → float32, no autocast)
    m32 = Qwen3ForCausalLM.from_pretrained(a.out, dtype=torch.float32).to(device).eval()
    nll, n = score(m32, val_plain, device, False)
    val_bytes = sum(len(t.encode()) for t in val_txt)
    cnll, cn = score(m32, val_chat, device, False)
    summary = {"params": n_params, "steps": step, "epochs": epoch, "val_tokens": n, "val_loss": nll / n,
               "val_ppl": math.exp(nll / n), "val_bits_per_byte": nll / math.log(2) / val_bytes,
               "val_chat_tokens": cn, "val_chat_ppl": math.exp(cnll / cn), "curve": curve,
               "train_fortunes": len(train_txt), "val_fortunes": len(val_txt), "train_plain_tokens": n_plain,
               "versions": versions, "args": vars(a)}
    log(f"shipped weights: held-out ppl {summary['val_ppl']:.3f} over {n} tokens, "
        f"{summary['val_bits_per_byte']:.4f} bits/byte; held-out chat ppl {summary['val_chat_ppl']:.3f}")
    try:
        for p in ["Life is", render_chat([{"role": "user", "content": "Tell me something about cats."}], True),
                  render_chat([{"role": "user", "content": "computers"}], True)]:
            ids = torch.tensor([tok.encode(p).ids], device=device)
            out = m32.generate(ids, max_new_tokens=60, do_sample=False, eos_token_id=[ime, eot], pad_token_id=eot)
            log("sample (transformers, greedy):", json.dumps(p + tok.decode(out[0, ids.shape[1]:].tolist(),
                                                                          skip_special_tokens=False)))
    except Exception as e:  # samples are a courtesy; never lose the run over them
        log("samples failed:", repr(e))
    del m32

    # --- reference logits for hearth eval (fixtures' format), float64 on the bf16 weights
    ref = Qwen3ForCausalLM.from_pretrained(a.out, dtype=torch.float64, attn_implementation="eager").to(device).eval()
    for name, p in ref.named_parameters():
        if not torch.equal(p, p.to(torch.bfloat16).to(torch.float64)):
            sys.exit(f"reference weight {name} is not the bf16 checkpoint")
    if not torch.equal(ref.lm_head.weight, ref.model.embed_tokens.weight):
        sys.exit("reference lm_head is not tied to the embeddings")
    long_val = next((t for t in val_txt if 90 <= len(tok.encode(t).ids) <= 130), val_txt[0])
    short_val = next((t for t in val_txt if 20 <= len(tok.encode(t).ids) <= 40), val_txt[-1])
    prompts = [
        "Love",
        "A man walks into a bar and",
        render_chat([{"role": "user", "content": "Tell me something about cats."}], True),
        render_chat([{"role": "system", "content": "You are a fortune cookie."},
                     {"role": "user", "content": "computers"},
                     {"role": "assistant", "content": short_val},
                     {"role": "user", "content": "What do you know about love?"}], True),
        long_val,
    ]
    tensors, meta = {}, []
    with torch.no_grad():
        for i, text in enumerate(prompts):
            ids = tok.encode(text).ids
            x = torch.tensor([ids], device=device)
            logits = ref(input_ids=x, use_cache=False).logits[0]
            greedy, margin, cur = [], [], list(ids)
            for _ in range(12):
                last = ref(input_ids=torch.tensor([cur], device=device), use_cache=False).logits[0, -1]
                top = torch.topk(last, 2)
                greedy.append(int(top.indices[0]))
                margin.append(float(top.values[0] - top.values[1]))
                cur.append(greedy[-1])
            tensors[f"p{i}.input_ids"] = torch.tensor(ids, dtype=torch.int32)
            tensors[f"p{i}.logits"] = logits.to(torch.float32).cpu().contiguous()
            tensors[f"p{i}.greedy"] = torch.tensor(greedy, dtype=torch.int32)
            tensors[f"p{i}.greedy_margin"] = torch.tensor(margin, dtype=torch.float32)
            meta.append({"prompt": i, "length": len(ids), "text": text})
            log(f"p{i}: {len(ids)} tokens, max|logit| {logits.abs().max().item():.2f}, min margin {min(margin):.3g}, "
                f"greedy {json.dumps(tok.decode(greedy, skip_special_tokens=False))}")
    from safetensors.torch import save_file
    save_file(tensors, os.path.join(a.out, "expected.safetensors"),
              metadata={"prompts": json.dumps(meta, ensure_ascii=False),
                        "reference": f"{versions} float64 eager, bf16 weights as shipped"})
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    log("done")
    with open(os.path.join(a.out, "training_log.txt"), "w") as f:
        f.write("\n".join(log_lines) + "\n")


if __name__ == "__main__":
    main()
