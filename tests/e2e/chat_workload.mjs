// A multi-turn chat workload for replica routing: CHATS conversations of TURNS turns over
// SYSTEMS system prompts (chat c uses system prompt c % SYSTEMS), CONCURRENCY chats at a
// time, each turn streamed with include_usage and the reply appended to the history.
// Every request carries "X-Forwarded-For: 10.<tag>.<c>.<t>" so that a replica's access log
// tells which chat and turn it served, and, with --key chat, "prompt_cache_key": "chat-<c>".
// Greedy decoding, fixed texts: the same run every time.
//
// usage: node tests/e2e/chat_workload.mjs URL MODEL [--chats 48] [--turns 6] [--systems 8]
//          [--concurrency 4] [--max-tokens 8] [--system-words 48] [--user-words 24] [--key chat|none]
//          [--tag 0]
// Prints one JSON object: requests, errors, prompt/cached/completion tokens, hit_rate
// (cached / prompt), seconds, requests_per_s, completion_tokens_per_s, ttft_p50_ms, ttft_p99_ms.
const [url, model, ...rest] = process.argv.slice(2);
const opt = { chats: 48, turns: 6, systems: 8, concurrency: 4, "max-tokens": 8, "system-words": 48,
              "user-words": 24, key: "chat", tag: 0 };
for (let i = 0; i < rest.length; i += 2) {
  const k = rest[i].replace(/^--/, "");
  if (!(k in opt)) { console.error(`chat_workload: unknown option ${rest[i]}`); process.exit(2); }
  opt[k] = k === "key" ? rest[i + 1] : Number(rest[i + 1]);
}
if (opt.chats > 256 || opt.turns > 256 || !(opt.tag >= 0 && opt.tag < 256)) { console.error("chat_workload: at most 256 chats and turns, tag 0..255"); process.exit(2); }

const vocabulary = ("river stone lantern harbor meadow copper violet signal orchard window thunder " +
  "compass feather glacier market puzzle saddle timber velvet whistle anchor basket candle desert").split(" ");
function words(seed, n) { // a fixed text of n words
  const out = [];
  for (let i = 0; i < n; i++) out.push(vocabulary[(seed * 7 + i * 13 + ((seed * i) % 5)) % vocabulary.length]);
  return out.join(" ");
}
const systems = Array.from({ length: opt.systems },
  (_, s) => `You are assistant number ${s}. ${words(1000 + s, opt["system-words"])}.`);

const stats = { requests: 0, errors: 0, prompt_tokens: 0, cached_tokens: 0, completion_tokens: 0, ttft: [],
                statuses: {} };
const decoder = new TextDecoder();

async function turn(c, t, messages) {
  const body = { model, messages, stream: true, stream_options: { include_usage: true }, temperature: 0,
                 max_tokens: opt["max-tokens"] };
  if (opt.key === "chat") body.prompt_cache_key = `chat-${c}`;
  const t0 = performance.now();
  stats.requests++;
  let res;
  try {
    res = await fetch(`${url}/v1/chat/completions`, { method: "POST", body: JSON.stringify(body),
      headers: { "Content-Type": "application/json", "X-Forwarded-For": `10.${opt.tag}.${c}.${t}` } });
  } catch (e) { stats.errors++; stats.statuses.fetch = (stats.statuses.fetch || 0) + 1; return null; }
  stats.statuses[res.status] = (stats.statuses[res.status] || 0) + 1;
  if (res.status !== 200) { stats.errors++; await res.text(); return null; }
  let buf = "", text = "", usage = null, first = 0, done = false;
  try {
    for await (const chunk of res.body) {
      buf += decoder.decode(chunk, { stream: true });
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const frame = buf.slice(0, i); buf = buf.slice(i + 2);
        if (!frame.startsWith("data: ")) continue;
        const data = frame.slice(6);
        if (data === "[DONE]") { done = true; continue; }
        const j = JSON.parse(data);
        if (j.usage) usage = j.usage;
        const d = j.choices && j.choices[0] && j.choices[0].delta;
        if (d && d.content) { if (!first) first = performance.now(); text += d.content; }
      }
    }
  } catch (e) { /* the stream broke: counted below */ }
  if (!done || !usage) { stats.errors++; return null; }
  stats.prompt_tokens += usage.prompt_tokens;
  stats.cached_tokens += usage.prompt_tokens_details ? usage.prompt_tokens_details.cached_tokens : 0;
  stats.completion_tokens += usage.completion_tokens;
  if (first) stats.ttft.push(first - t0);
  return text;
}

async function chat(c) {
  const messages = [{ role: "system", content: systems[c % opt.systems] }];
  for (let t = 0; t < opt.turns; t++) {
    messages.push({ role: "user", content: `Question ${t} of conversation ${c}: ${words(c * 31 + t, opt["user-words"])}?` });
    const reply = await turn(c, t, messages);
    if (reply === null) return;
    messages.push({ role: "assistant", content: reply });
  }
}

const t0 = performance.now();
let next = 0;
await Promise.all(Array.from({ length: opt.concurrency }, async () => {
  while (next < opt.chats) await chat(next++);
}));
const seconds = (performance.now() - t0) / 1000;
const q = (p) => {
  if (!stats.ttft.length) return null;
  const s = [...stats.ttft].sort((a, b) => a - b);
  return +s[Math.min(s.length - 1, Math.floor(p * s.length))].toFixed(2);
};
console.log(JSON.stringify({
  requests: stats.requests, errors: stats.errors, statuses: stats.statuses,
  prompt_tokens: stats.prompt_tokens, cached_tokens: stats.cached_tokens, completion_tokens: stats.completion_tokens,
  hit_rate: stats.prompt_tokens ? +(stats.cached_tokens / stats.prompt_tokens).toFixed(4) : 0,
  seconds: +seconds.toFixed(3), requests_per_s: +(stats.requests / seconds).toFixed(2),
  completion_tokens_per_s: +(stats.completion_tokens / seconds).toFixed(1),
  ttft_p50_ms: q(0.5), ttft_p99_ms: q(0.99),
}));
