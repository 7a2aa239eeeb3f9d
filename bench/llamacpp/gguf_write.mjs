// Writes a GGUF (version 3) file from a Hugging Face Qwen3 directory (config.json,
// tokenizer.json, model.safetensors or its shards) so that llama.cpp runs the same
// weights as hearth: matrices keep their dtype (bf16 / f16 / f32), 1-D norm vectors
// become f32 (llama.cpp's CPU norms want f32), and the byte-level BPE tokenizer is
// stored as llama.cpp's "gpt2" model with the qwen2 pre-tokenizer.
//
// usage: node bench/llamacpp/gguf_write.mjs MODEL_DIR OUT.gguf
import fs from "node:fs";
import path from "node:path";

const [dir, out] = process.argv.slice(2);
if (!dir || !out) {
  console.error("usage: node bench/llamacpp/gguf_write.mjs MODEL_DIR OUT.gguf");
  process.exit(2);
}

const cfg = JSON.parse(fs.readFileSync(path.join(dir, "config.json"), "utf8"));
if (!(cfg.architectures || []).includes("Qwen3ForCausalLM")) {
  console.error("gguf_write: only dense Qwen3ForCausalLM checkpoints are supported");
  process.exit(2);
}
const tok = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));

// ---------------------------------------------------------------- safetensors

function safetensorsFiles() {
  const index = path.join(dir, "model.safetensors.index.json");
  if (fs.existsSync(index)) {
    const m = JSON.parse(fs.readFileSync(index, "utf8")).weight_map;
    return [...new Set(Object.values(m))].map((f) => path.join(dir, f));
  }
  return [path.join(dir, "model.safetensors")];
}

const tensors = new Map(); // name -> {file, dtype, shape, begin, end}
for (const file of safetensorsFiles()) {
  const fd = fs.openSync(file, "r");
  const lenBuf = Buffer.alloc(8);
  fs.readSync(fd, lenBuf, 0, 8, 0);
  const hlen = Number(lenBuf.readBigUInt64LE(0));
  const hbuf = Buffer.alloc(hlen);
  fs.readSync(fd, hbuf, 0, hlen, 8);
  const header = JSON.parse(hbuf.toString("utf8"));
  for (const [name, t] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    tensors.set(name, {
      fd, dtype: t.dtype, shape: t.shape, begin: 8 + hlen + t.data_offsets[0], end: 8 + hlen + t.data_offsets[1],
    });
  }
}

// ---------------------------------------------------------------- tensors to write

const GGML = { F32: 0, F16: 1, BF16: 30 };
const plan = []; // {name, src, type, dims (ne0 first), bytes}
function add(gguf, hf) {
  const t = tensors.get(hf);
  if (!t) throw new Error(`missing tensor ${hf}`);
  const oneD = t.shape.length === 1;
  const type = oneD ? GGML.F32 : GGML[t.dtype];
  if (type === undefined) throw new Error(`${hf}: dtype ${t.dtype} not supported`);
  const n = t.shape.reduce((a, b) => a * b, 1);
  plan.push({ name: gguf, src: t, type, dims: [...t.shape].reverse(), bytes: n * (type === GGML.F32 ? 4 : 2) });
}
add("token_embd.weight", "model.embed_tokens.weight");
for (let i = 0; i < cfg.num_hidden_layers; i++) {
  const p = `model.layers.${i}.`;
  add(`blk.${i}.attn_norm.weight`, p + "input_layernorm.weight");
  add(`blk.${i}.attn_q.weight`, p + "self_attn.q_proj.weight");
  add(`blk.${i}.attn_k.weight`, p + "self_attn.k_proj.weight");
  add(`blk.${i}.attn_v.weight`, p + "self_attn.v_proj.weight");
  add(`blk.${i}.attn_output.weight`, p + "self_attn.o_proj.weight");
  add(`blk.${i}.attn_q_norm.weight`, p + "self_attn.q_norm.weight");
  add(`blk.${i}.attn_k_norm.weight`, p + "self_attn.k_norm.weight");
  add(`blk.${i}.ffn_norm.weight`, p + "post_attention_layernorm.weight");
  add(`blk.${i}.ffn_gate.weight`, p + "mlp.gate_proj.weight");
  add(`blk.${i}.ffn_up.weight`, p + "mlp.up_proj.weight");
  add(`blk.${i}.ffn_down.weight`, p + "mlp.down_proj.weight");
}
add("output_norm.weight", "model.norm.weight");
if (!cfg.tie_word_embeddings && tensors.has("lm_head.weight")) add("output.weight", "lm_head.weight");

// ---------------------------------------------------------------- tokenizer

const vocabSize = cfg.vocab_size;
const tokens = new Array(vocabSize).fill(null);
const types = new Int32Array(vocabSize).fill(1); // 1 normal, 3 control, 4 user-defined, 5 unused
for (const [s, id] of Object.entries(tok.model.vocab)) if (id < vocabSize) tokens[id] = s;
for (const a of tok.added_tokens || []) {
  if (a.id >= vocabSize) continue;
  tokens[a.id] = a.content;
  types[a.id] = a.special ? 3 : 4;
}
for (let i = 0; i < vocabSize; i++) {
  if (tokens[i] === null) {
    tokens[i] = `[PAD${i}]`;
    types[i] = 5;
  }
}
const merges = tok.model.merges.map((m) => (Array.isArray(m) ? m.join(" ") : m));
const eos = Array.isArray(cfg.eos_token_id) ? cfg.eos_token_id[0] : cfg.eos_token_id;

// ---------------------------------------------------------------- GGUF encoding

const T = { U32: 4, I32: 5, F32: 6, BOOL: 7, STR: 8, ARR: 9, U64: 10 };
const chunks = [];
let size = 0;
function put(b) {
  chunks.push(b);
  size += b.length;
}
function u32(v) { const b = Buffer.alloc(4); b.writeUInt32LE(v); put(b); }
function i32(v) { const b = Buffer.alloc(4); b.writeInt32LE(v); put(b); }
function u64(v) { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); put(b); }
function f32(v) { const b = Buffer.alloc(4); b.writeFloatLE(v); put(b); }
function str(s) { const b = Buffer.from(s, "utf8"); u64(b.length); put(b); }

const kv = [];
const kvU32 = (k, v) => kv.push([k, () => { u32(T.U32); u32(v); }]);
const kvF32 = (k, v) => kv.push([k, () => { u32(T.F32); f32(v); }]);
const kvStr = (k, v) => kv.push([k, () => { u32(T.STR); str(v); }]);
const kvBool = (k, v) => kv.push([k, () => { u32(T.BOOL); put(Buffer.from([v ? 1 : 0])); }]);
const headDim = cfg.head_dim || cfg.hidden_size / cfg.num_attention_heads;
const ropeTheta = cfg.rope_theta ?? cfg.rope_parameters?.rope_theta ?? 1000000;
kvStr("general.architecture", "qwen3");
kvStr("general.name", path.basename(path.resolve(dir)));
kvU32("general.alignment", 32);
kvU32("qwen3.context_length", cfg.max_position_embeddings);
kvU32("qwen3.embedding_length", cfg.hidden_size);
kvU32("qwen3.block_count", cfg.num_hidden_layers);
kvU32("qwen3.feed_forward_length", cfg.intermediate_size);
kvU32("qwen3.attention.head_count", cfg.num_attention_heads);
kvU32("qwen3.attention.head_count_kv", cfg.num_key_value_heads);
kvU32("qwen3.attention.key_length", headDim);
kvU32("qwen3.attention.value_length", headDim);
kvF32("qwen3.rope.freq_base", ropeTheta);
kvF32("qwen3.attention.layer_norm_rms_epsilon", cfg.rms_norm_eps);
kvStr("tokenizer.ggml.model", "gpt2");
kvStr("tokenizer.ggml.pre", "qwen2");
kv.push(["tokenizer.ggml.tokens", () => { u32(T.ARR); u32(T.STR); u64(tokens.length); for (const s of tokens) str(s); }]);
kv.push(["tokenizer.ggml.token_type", () => { u32(T.ARR); u32(T.I32); u64(types.length); for (const t of types) i32(t); }]);
kv.push(["tokenizer.ggml.merges", () => { u32(T.ARR); u32(T.STR); u64(merges.length); for (const m of merges) str(m); }]);
if (Number.isInteger(eos)) {
  kvU32("tokenizer.ggml.eos_token_id", eos);
  kvU32("tokenizer.ggml.padding_token_id", eos);
}
kvBool("tokenizer.ggml.add_bos_token", false);

put(Buffer.from("GGUF", "ascii"));
u32(3);
u64(plan.length);
u64(kv.length);
for (const [k, w] of kv) {
  str(k);
  w();
}
const ALIGN = 32;
let off = 0;
for (const t of plan) {
  t.offset = off;
  str(t.name);
  u32(t.dims.length);
  for (const d of t.dims) u64(d);
  u32(t.type);
  u64(off);
  off += Math.ceil(t.bytes / ALIGN) * ALIGN;
}
const pad = (Math.ceil(size / ALIGN) * ALIGN) - size;
put(Buffer.alloc(pad));

// ---------------------------------------------------------------- write

const ofd = fs.openSync(out, "w");
for (const c of chunks) fs.writeSync(ofd, c);
const CH = 64 << 20;
for (const t of plan) {
  const src = t.src;
  if (t.type === GGML.F32 && src.dtype !== "F32") {
    const n = t.bytes / 4, raw = Buffer.alloc(src.end - src.begin), f = Buffer.alloc(t.bytes);
    fs.readSync(src.fd, raw, 0, raw.length, src.begin);
    for (let i = 0; i < n; i++) {
      if (src.dtype === "BF16") f.writeUInt32LE(raw.readUInt16LE(2 * i) << 16 >>> 0, 4 * i);
      else throw new Error(`${t.name}: cannot widen ${src.dtype} norms`);
    }
    fs.writeSync(ofd, f);
  } else {
    for (let p = src.begin; p < src.end; p += CH) {
      const b = Buffer.alloc(Math.min(CH, src.end - p));
      fs.readSync(src.fd, b, 0, b.length, p);
      fs.writeSync(ofd, b);
    }
  }
  const tail = Math.ceil(t.bytes / ALIGN) * ALIGN - t.bytes;
  if (tail) fs.writeSync(ofd, Buffer.alloc(tail));
}
fs.closeSync(ofd);
console.error(`gguf_write: ${plan.length} tensors, ${tokens.length} tokens, ${merges.length} merges -> ${out}`);
