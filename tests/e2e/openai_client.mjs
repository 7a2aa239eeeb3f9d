// End-to-end checks of `hearth serve` with the official `openai` npm package (pinned in
// tests/oracle/package.json): completions and chat, streamed and not, n > 1, stop strings,
// seed reproducibility, logprobs in both shapes, prefix reuse (cached_tokens, and the same
// text as a server with the prefix cache off), and errors as the client library sees them.
//
// usage: node tests/e2e/openai_client.mjs URL_CACHE_ON URL_CACHE_OFF API_KEY MODEL
// Prints "ok NAME" / "FAIL NAME: why" per check and ends with "RESULT passed=N failed=N".
import { createRequire } from "node:module";

const require = createRequire(new URL("../oracle/package.json", import.meta.url));
const { default: OpenAI } = await import(require.resolve("openai"));

const [urlOn, urlOff, apiKey, model] = process.argv.slice(2);
const on = new OpenAI({ baseURL: `${urlOn}/v1`, apiKey, maxRetries: 0, timeout: 60000 });
const off = new OpenAI({ baseURL: `${urlOff}/v1`, apiKey, maxRetries: 0, timeout: 60000 });

let passed = 0, failed = 0;
function check(name, cond, why = "") {
  if (cond) { passed++; console.log(`ok   ${name}`); }
  else { failed++; console.log(`FAIL ${name}${why ? ": " + why : ""}`); }
}
async function step(name, fn) {
  try { await fn(); } catch (e) { failed++; console.log(`FAIL ${name}: threw ${e?.stack || e}`); }
}
const usageOk = (u) => u && Number.isInteger(u.prompt_tokens) && Number.isInteger(u.completion_tokens) &&
  u.total_tokens === u.prompt_tokens + u.completion_tokens && Number.isInteger(u.prompt_tokens_details?.cached_tokens);

await step("completions", async () => {
  const r = await on.completions.create({ model, prompt: "The capital of France is", max_tokens: 6, temperature: 0 });
  check("completions: object and id", r.object === "text_completion" && r.id.startsWith("cmpl-"), JSON.stringify(r));
  check("completions: model, created, fingerprint", r.model === model && Number.isInteger(r.created) &&
    typeof r.system_fingerprint === "string");
  check("completions: one choice, length", r.choices.length === 1 && r.choices[0].index === 0 &&
    r.choices[0].finish_reason === "length" && typeof r.choices[0].text === "string");
  check("completions: usage", usageOk(r.usage) && r.usage.completion_tokens === 6, JSON.stringify(r.usage));
});

await step("completions stream", async () => {
  const s = await on.completions.create({ model, prompt: "Once upon a time", max_tokens: 8, temperature: 0,
    stream: true, stream_options: { include_usage: true } });
  let text = "", finish = null, usage = null, chunks = 0;
  for await (const c of s) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) { text += ch.text; if (ch.finish_reason) finish = ch.finish_reason; }
  }
  const whole = await on.completions.create({ model, prompt: "Once upon a time", max_tokens: 8, temperature: 0 });
  check("completions stream: same text as not streamed", text === whole.choices[0].text,
    `${JSON.stringify(text)} vs ${JSON.stringify(whole.choices[0].text)}`);
  check("completions stream: finish and usage chunk", finish === "length" && usageOk(usage) &&
    usage.completion_tokens === 8, `${finish} ${JSON.stringify(usage)}`);
});

await step("chat", async () => {
  const r = await on.chat.completions.create({ model, max_tokens: 5, temperature: 0,
    messages: [{ role: "system", content: "You are terse." }, { role: "user", content: "Hi there" }] });
  check("chat: object and id", r.object === "chat.completion" && r.id.startsWith("chatcmpl-"));
  const m = r.choices[0].message;
  check("chat: assistant message", m.role === "assistant" && typeof m.content === "string" &&
    r.choices[0].finish_reason === "length", JSON.stringify(r.choices[0]));
  check("chat: usage", usageOk(r.usage) && r.usage.completion_tokens === 5 && r.usage.prompt_tokens > 10,
    JSON.stringify(r.usage));
  const parts = await on.chat.completions.create({ model, max_tokens: 5, temperature: 0,
    messages: [{ role: "developer", content: [{ type: "text", text: "You are terse." }] },
               { role: "user", content: [{ type: "text", text: "Hi there" }] }] });
  check("chat: text parts and developer role render like strings and system", parts.choices[0].message.content === m.content &&
    parts.usage.prompt_tokens === r.usage.prompt_tokens);
});

await step("chat stream", async () => {
  const req = { model, max_tokens: 7, temperature: 0, messages: [{ role: "user", content: "Count to three" }] };
  const s = await on.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = "", role = null, finish = null, usage = null, first = true, firstRoleOk = false;
  for await (const c of s) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      if (first) { firstRoleOk = ch.delta.role === "assistant"; first = false; }
      if (ch.delta.role) role = ch.delta.role;
      if (ch.delta.content) text += ch.delta.content;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  const whole = await on.chat.completions.create(req);
  check("chat stream: role first", firstRoleOk && role === "assistant");
  check("chat stream: same text as not streamed", text === whole.choices[0].message.content);
  check("chat stream: finish and usage", finish === "length" && usageOk(usage) && usage.completion_tokens === 7);
});

await step("n > 1", async () => {
  const r = await on.completions.create({ model, prompt: "Pick a word:", max_tokens: 4, n: 3, temperature: 1, seed: 7 });
  check("n=3: three choices indexed 0..2", r.choices.length === 3 &&
    [0, 1, 2].every((i) => r.choices.some((c) => c.index === i)), JSON.stringify(r.choices.map((c) => c.index)));
  check("n=3: usage counts every sample", r.usage.completion_tokens === 12, JSON.stringify(r.usage));
  const s = await on.chat.completions.create({ model, max_tokens: 3, n: 2, temperature: 1, seed: 7, stream: true,
    messages: [{ role: "user", content: "hello" }] });
  const seen = new Map();
  for await (const c of s) for (const ch of c.choices) if (ch.finish_reason) seen.set(ch.index, ch.finish_reason);
  check("n=2 stream: both choices finish", seen.size === 2 && seen.has(0) && seen.has(1));
  const multi = await on.completions.create({ model, prompt: ["first prompt", "second prompt"], max_tokens: 2, n: 2,
    temperature: 0 });
  check("two prompts x n=2: four choices in prompt order", multi.choices.length === 4 &&
    multi.choices.map((c) => c.index).join() === "0,1,2,3");
  const a = await on.completions.create({ model, prompt: "second prompt", max_tokens: 2, temperature: 0 });
  check("two prompts: each choice is its own prompt's", multi.choices[2].text === a.choices[0].text &&
    multi.choices[3].text === a.choices[0].text);
});

await step("stop", async () => {
  const base = { model, prompt: "A list of things:", max_tokens: 16, temperature: 0 };
  const full = (await on.completions.create(base)).choices[0].text;
  const chars = [...full];
  const k = Math.floor(chars.length / 2);
  let stop = chars.slice(k, k + 2).join("");
  if (!stop.trim()) stop = chars.slice(k, k + 4).join("");
  const want = full.slice(0, full.indexOf(stop));
  const r = await on.completions.create({ ...base, stop: [stop] });
  check("stop: text ends before the stop string", r.choices[0].text === want && r.choices[0].finish_reason === "stop",
    `stop ${JSON.stringify(stop)} full ${JSON.stringify(full)} got ${JSON.stringify(r.choices[0].text)} ${r.choices[0].finish_reason}`);
  const s = await on.completions.create({ ...base, stop, stream: true });
  let text = "", finish = null;
  for await (const c of s) for (const ch of c.choices) { text += ch.text; if (ch.finish_reason) finish = ch.finish_reason; }
  check("stop: streamed the same", text === want && finish === "stop", JSON.stringify(text));
});

await step("seed", async () => {
  const req = { model, prompt: "Random:", max_tokens: 12, temperature: 1.0, top_p: 1.0 };
  const a = await on.completions.create({ ...req, seed: 1234 });
  const b = await on.completions.create({ ...req, seed: 1234 });
  const c = await on.completions.create({ ...req, seed: 4321 });
  check("seed: same seed, same text", a.choices[0].text === b.choices[0].text);
  check("seed: another seed, another text", a.choices[0].text !== c.choices[0].text);
  const cs = { model, max_tokens: 10, temperature: 1.0, seed: 99, messages: [{ role: "user", content: "go" }] };
  const x = await on.chat.completions.create(cs);
  const y = await off.chat.completions.create(cs);
  check("seed: chat reproducible across servers", x.choices[0].message.content === y.choices[0].message.content);
});

await step("logprobs", async () => {
  const r = await on.completions.create({ model, prompt: "Logprobs please", max_tokens: 5, logprobs: 2, temperature: 0 });
  const lp = r.choices[0].logprobs;
  check("completions logprobs: parallel arrays", lp && lp.tokens.length === 5 && lp.token_logprobs.length === 5 &&
    lp.top_logprobs.length === 5 && lp.text_offset.length === 5, JSON.stringify(lp));
  check("completions logprobs: values", lp.token_logprobs.every((x) => typeof x === "number" && x <= 0) &&
    lp.top_logprobs.every((d) => Object.keys(d).length >= 1 && Object.keys(d).length <= 3) &&
    lp.text_offset.every((o, i) => i === 0 || o >= lp.text_offset[i - 1]));
  // greedy: the sampled token is the most likely one
  check("completions logprobs: greedy picks the best", lp.tokens.every((t, i) =>
    Math.max(...Object.values(lp.top_logprobs[i])) <= lp.token_logprobs[i] + 1e-6));
  if (!lp.tokens.some((t) => t.includes("\uFFFD")))
    check("completions logprobs: tokens spell the text", lp.tokens.join("") === r.choices[0].text);
  const c = await on.chat.completions.create({ model, max_tokens: 4, logprobs: true, top_logprobs: 3, temperature: 0,
    messages: [{ role: "user", content: "Logprobs please" }] });
  const content = c.choices[0].logprobs?.content;
  check("chat logprobs: one entry per token", Array.isArray(content) && content.length === 4, JSON.stringify(c.choices[0]));
  check("chat logprobs: token, logprob, bytes, top_logprobs", content.every((e) => typeof e.token === "string" &&
    e.logprob <= 0 && Array.isArray(e.bytes) && e.top_logprobs.length === 3 &&
    e.top_logprobs.every((t) => typeof t.token === "string" && Array.isArray(t.bytes))));
  check("chat logprobs: bytes are the token's UTF-8", content.every((e) =>
    Buffer.from(e.bytes).toString("utf8") === e.token));
});

await step("prefix reuse", async () => {
  const system = "You are a careful assistant. ".repeat(12) + "Always answer in one short sentence.";
  const ask = (client, q) => client.chat.completions.create({ model, max_tokens: 8, temperature: 0,
    messages: [{ role: "system", content: system }, { role: "user", content: q }] });
  await ask(on, "What is the first question?");
  const second = await ask(on, "And what is the second question?");
  const cached = second.usage.prompt_tokens_details.cached_tokens;
  check("prefix reuse: cached_tokens > 0 for a shared system prompt", cached > 0 && cached < second.usage.prompt_tokens,
    JSON.stringify(second.usage));
  const cold = await ask(off, "And what is the second question?");
  check("prefix reuse: cache off reports no cached tokens", cold.usage.prompt_tokens_details.cached_tokens === 0);
  check("prefix reuse: same text with the cache on and off", cold.choices[0].message.content === second.choices[0].message.content,
    `${JSON.stringify(second.choices[0].message.content)} vs ${JSON.stringify(cold.choices[0].message.content)}`);
  const again = await ask(on, "And what is the second question?");
  check("prefix reuse: a repeat hits again, same text", again.usage.prompt_tokens_details.cached_tokens >= cached &&
    again.choices[0].message.content === cold.choices[0].message.content);
});

await step("errors", async () => {
  const expectError = async (name, fn, status, param) => {
    try { await fn(); check(name, false, "no error"); }
    catch (e) {
      check(name, e.status === status && (param === undefined || e.param === param) && typeof e.message === "string",
        `status ${e.status} param ${e.param} ${e.message}`);
    }
  };
  await expectError("error: unknown model is 404", () => on.completions.create({ model: "gpt-x", prompt: "x" }), 404, "model");
  await expectError("error: bad temperature is 400", () => on.completions.create({ model, prompt: "x", temperature: 9 }),
    400, "temperature");
  await expectError("error: empty messages is 400", () => on.chat.completions.create({ model, messages: [] }), 400, "messages");
  await expectError("error: bad role is 400", () => on.chat.completions.create({ model,
    messages: [{ role: "robot", content: "x" }] }), 400, "messages[0].role");
  await expectError("error: beyond the context is 400", () => on.completions.create({ model, prompt: "x",
    max_tokens: 1000000 }), 400, "max_tokens");
  const bad = new OpenAI({ baseURL: `${urlOn}/v1`, apiKey: "sk-wrong", maxRetries: 0 });
  await expectError("error: bad key is 401", () => bad.models.list(), 401);
  const models = await on.models.list();
  check("models: lists the served model", models.data.length === 1 && models.data[0].id === model);
});

console.log(`RESULT passed=${passed} failed=${failed}`);
process.exit(failed ? 1 : 0);
