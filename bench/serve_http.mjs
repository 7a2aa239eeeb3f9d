// The HTTP side of bench/serve.sh.  Two workloads against a running `hearth serve`:
//   throughput URL MODEL PROMPT_TOKENS OUTPUT_TOKENS CONCURRENCY VOCAB
//     CONCURRENCY streamed completions of random token-id prompts (ignore_eos), all at
//     once, as `hearth bench throughput` submits them through the C API.
//   chat URL MODEL SYSTEM_WORDS OUTPUT_TOKENS CONCURRENCY REQUESTS
//     REQUESTS chat requests sharing one long system prompt, CONCURRENCY at a time.
// Prints one JSON object: wall seconds, tokens/s, TTFT and inter-token latency percentiles.
const [mode, url, model, a, b, c, d] = process.argv.slice(2);
const now = () => performance.now() / 1000;
const pct = (xs, p) => { if (!xs.length) return 0; const s = [...xs].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };
function rng(seed) {
  return () => { seed |= 0; seed = (seed + 0x6d2b79f5) | 0; let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t; return ((t ^ (t >>> 14)) >>> 0) / 4294967296; };
}

// One streamed request: its TTFT, its inter-token gaps and its usage.
async function stream(path, body, itl) {
  const t0 = now();
  const res = await fetch(`${url}${path}`, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }) });
  if (res.status !== 200) throw new Error(`${res.status} ${await res.text()}`);
  const dec = new TextDecoder();
  let buf = "", ttft = null, last = null, usage = null;
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true });
    let k;
    while ((k = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, k); buf = buf.slice(k + 2);
      if (!ev.startsWith("data: ") || ev === "data: [DONE]") continue;
      const j = JSON.parse(ev.slice(6));
      if (j.usage) usage = j.usage;
      if (!j.choices?.length) continue;
      /* a chat stream opens with a role-only chunk: the first token is the first content */
      const c = j.choices[0], d = c.delta;
      if (d ? !(d.content || d.reasoning_content) && c.finish_reason == null : !c.text && c.finish_reason == null)
        continue;
      const t = now();
      if (ttft === null) ttft = t - t0; else itl.push(t - last);
      last = t;
    }
  }
  return { ttft, usage };
}

async function pool(n, conc, fn) {
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(conc, n) }, async () => {
    while (next < n) await fn(next++);
  }));
}

const itl = [], ttfts = [];
let prompt = 0, cached = 0, generated = 0;
const t0 = now();
if (mode === "throughput") {
  const P = +a, O = +b, C = +c, V = +d;
  await pool(C, C, async (i) => {
    const r = rng(100 + i);
    const ids = Array.from({ length: P }, () => Math.floor(r() * V));
    const { ttft, usage } = await stream("/v1/completions", { model, prompt: ids, max_tokens: O, ignore_eos: true,
      seed: i }, itl);
    ttfts.push(ttft); prompt += usage.prompt_tokens; generated += usage.completion_tokens;
  });
} else {
  const W = +a, O = +b, C = +c, N = +d;
  const system = Array.from({ length: W }, (_, i) => `word${i % 97}`).join(" ");
  await pool(N, C, async (i) => {
    const { ttft, usage } = await stream("/v1/chat/completions", { model, max_tokens: O, ignore_eos: true, seed: i,
      messages: [{ role: "system", content: system }, { role: "user", content: `Question number ${i}: why?` }] }, itl);
    ttfts.push(ttft); prompt += usage.prompt_tokens; generated += usage.completion_tokens;
    cached += usage.prompt_tokens_details.cached_tokens;
  });
}
const secs = now() - t0;
console.log(JSON.stringify({ workload: mode, seconds: +secs.toFixed(3),
  tokens_per_s: +((prompt + generated) / secs).toFixed(2), generated_per_s: +(generated / secs).toFixed(2),
  prompt_tokens: prompt, cached_tokens: cached, generated_tokens: generated,
  ttft_p50_ms: +(pct(ttfts, 0.5) * 1000).toFixed(1), ttft_p99_ms: +(pct(ttfts, 0.99) * 1000).toFixed(1),
  itl_p50_ms: +(pct(itl, 0.5) * 1000).toFixed(2), itl_p99_ms: +(pct(itl, 0.99) * 1000).toFixed(2) }));
