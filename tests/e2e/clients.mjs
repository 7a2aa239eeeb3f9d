// `hearth serve` as the popular clients call it, unmodified and pinned in
// tests/oracle/package.json: the official `openai` package (chat without max_tokens,
// models.retrieve, the Responses API streamed and not), LangChain's ChatOpenAI (invoke,
// stream, bindTools) and the Vercel AI SDK (generateText / streamText through
// @ai-sdk/openai, whose default model calls /v1/responses, and through
// @ai-sdk/openai-compatible), on a server whose KV pool is smaller than the model's
// context (so max_model_len is the pool's).
//
// usage: node tests/e2e/clients.mjs URL MODEL MAX_MODEL_LEN
// Prints "ok NAME" / "FAIL NAME: why" per check and ends with "RESULT passed=N failed=N".
import { createRequire } from "node:module";

const require = createRequire(new URL("../oracle/package.json", import.meta.url));
const { default: OpenAI } = await import(require.resolve("openai"));
const { ChatOpenAI } = await import(require.resolve("@langchain/openai"));
const { generateText, streamText, tool } = await import(require.resolve("ai"));
const { createOpenAI } = await import(require.resolve("@ai-sdk/openai"));
const { createOpenAICompatible } = await import(require.resolve("@ai-sdk/openai-compatible"));
const { z } = await import(require.resolve("zod"));

const [url, model, maxLenArg] = process.argv.slice(2);
const maxLen = Number(maxLenArg);
const apiKey = "sk-none";
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0, timeout: 120000 });

let passed = 0, failed = 0;
function check(name, cond, why = "") {
  if (cond) { passed++; console.log(`ok   ${name}`); }
  else { failed++; console.log(`FAIL ${name}${why ? ": " + why : ""}`); }
}
async function step(name, fn) {
  try { await fn(); } catch (e) { failed++; console.log(`FAIL ${name}: threw ${e?.stack || e}`); }
}
// a system prompt of more than one KV block, so that a repeat hits the prefix cache
const system = "You are a helpful assistant. Answer in one short sentence, plainly, without lists. ".repeat(3);
const EOS = 151645; // <|im_end|>

await step("openai: models.retrieve", async () => {
  const m = await client.models.retrieve(model);
  check("models.retrieve: the served model", m.id === model && m.object === "model" && m.max_model_len === maxLen,
    JSON.stringify(m));
  let status = 0;
  try { await client.models.retrieve("no-such-model"); } catch (e) { status = e.status; }
  check("models.retrieve: unknown model is 404", status === 404, String(status));
});

await step("openai: chat without max_tokens", async () => {
  const r = await client.chat.completions.create({ model, messages: [{ role: "user", content: "Hi" }],
    temperature: 0 });
  const u = r.usage;
  check("chat without max_tokens: generates up to max_model_len", r.choices[0].finish_reason === "length" &&
    u.prompt_tokens + u.completion_tokens === maxLen, JSON.stringify(u));
});

await step("openai: chat logprobs leave out the stop token", async () => {
  const r = await client.chat.completions.create({ model, messages: [{ role: "user", content: "Hi" }],
    max_tokens: 4, logprobs: true, top_logprobs: 2, logit_bias: { [EOS]: 100 } });
  const c = r.choices[0];
  check("chat logprobs: stopped by <|im_end|>", c.finish_reason === "stop" && r.usage.completion_tokens === 1,
    JSON.stringify(r));
  check("chat logprobs: no entry for <|im_end|>", Array.isArray(c.logprobs?.content) && c.logprobs.content.length === 0,
    JSON.stringify(c.logprobs));
  const r2 = await client.chat.completions.create({ model, messages: [{ role: "user", content: "Hi" }],
    max_tokens: 3, logprobs: true });
  check("chat logprobs: one entry per generated token otherwise", r2.choices[0].logprobs.content.length === 3);
});

await step("openai: responses", async () => {
  const req = { model, instructions: system, input: "What is a cat?", max_output_tokens: 6, temperature: 0 };
  const r = await client.responses.create(req);
  check("responses: object, status, output_text", r.object === "response" && r.id.startsWith("resp_") &&
    r.status === "incomplete" && r.incomplete_details?.reason === "max_output_tokens" &&
    typeof r.output_text === "string" && r.output_text.length > 0, JSON.stringify(r));
  check("responses: usage", r.usage.output_tokens === 6 && r.usage.input_tokens > 32 &&
    r.usage.total_tokens === r.usage.input_tokens + 6 && Number.isInteger(r.usage.input_tokens_details.cached_tokens),
    JSON.stringify(r.usage));
  const again = await client.responses.create(req);
  check("responses: the repeat's prompt comes from the prefix cache", again.usage.input_tokens_details.cached_tokens >= 32 &&
    again.output_text === r.output_text, JSON.stringify(again.usage));
  // a conversation as items, the earlier assistant turn given by reference (the AI SDK's way)
  const msgId = r.output.find((o) => o.type === "message").id;
  const follow = await client.responses.create({ model, max_output_tokens: 2, input: [
    { role: "user", content: [{ type: "input_text", text: "What is a cat?" }] },
    { type: "item_reference", id: msgId },
    { role: "user", content: "And a dog?" }] });
  check("responses: item_reference to an earlier output item", follow.status === "incomplete" &&
    follow.usage.input_tokens > 10);
  // stopped by a stop string: status completed
  const done = await client.responses.create({ model, input: "Hi", max_output_tokens: 50, stop: [" ", "a", "e"] });
  check("responses: completed when the model stops", done.status === "completed" && done.incomplete_details === null,
    JSON.stringify(done));
  let status = 0, msg = "";
  try { await client.responses.create({ model, input: "Hi", previous_response_id: r.id }); }
  catch (e) { status = e.status; msg = e.message; }
  check("responses: previous_response_id is 400", status === 400 && /previous_response_id/.test(msg), msg);
  try { await client.responses.create({ model, input: [{ type: "item_reference", id: "msg_unknown" }] }); status = 0; }
  catch (e) { status = e.status; }
  check("responses: unknown item_reference is 400", status === 400);
});

await step("openai: responses stream", async () => {
  const s = await client.responses.create({ model, instructions: system, input: "Hello", max_output_tokens: 5,
    stream: true });
  const types = [];
  let text = "", final = null, seqOk = true, last = -1;
  for await (const ev of s) {
    types.push(ev.type);
    if (ev.sequence_number !== last + 1) seqOk = false;
    last = ev.sequence_number;
    if (ev.type === "response.output_text.delta") text += ev.delta;
    if (ev.type === "response.completed" || ev.type === "response.incomplete") final = ev.response;
  }
  check("responses stream: event order", types[0] === "response.created" && types[1] === "response.in_progress" &&
    types.includes("response.output_item.added") && types.includes("response.output_text.delta") &&
    types.includes("response.output_text.done") && types.includes("response.output_item.done") &&
    types[types.length - 1] === "response.incomplete", types.join(","));
  check("responses stream: sequence numbers", seqOk);
  check("responses stream: the deltas make the final text", final && final.output[0].content[0].text === text &&
    final.usage.output_tokens === 5 && Number.isInteger(final.usage.input_tokens_details.cached_tokens),
    JSON.stringify(final));
});

await step("langchain: ChatOpenAI", async () => {
  const llm = new ChatOpenAI({ model, apiKey, configuration: { baseURL: `${url}/v1` }, maxRetries: 0,
    temperature: 0 });
  const m = await llm.invoke("Hi");
  const u = m.usage_metadata;
  check("langchain invoke: without max_tokens, up to max_model_len", typeof m.content === "string" &&
    m.content.length > 0 && u && u.input_tokens + u.output_tokens === maxLen, JSON.stringify(u));
  const short = new ChatOpenAI({ model, apiKey, configuration: { baseURL: `${url}/v1` }, maxRetries: 0,
    temperature: 0, maxTokens: 6 });
  let streamed = "", n = 0;
  for await (const chunk of await short.stream("Hi")) { streamed += chunk.content; n++; }
  check("langchain stream: chunks", n >= 2 && streamed.length > 0, `${n} chunks`);
  const withTools = short.bindTools([{ type: "function", function: { name: "get_weather",
    description: "The weather in a city", parameters: { type: "object", properties: { city: { type: "string" } },
      required: ["city"] } } }]);
  const t = await withTools.invoke("What is the weather in Paris?");
  check("langchain bindTools: the request is served", Array.isArray(t.tool_calls) &&
    t.response_metadata?.finish_reason !== undefined, JSON.stringify(t.response_metadata));
});

await step("ai sdk: @ai-sdk/openai (Responses)", async () => {
  const openai = createOpenAI({ baseURL: `${url}/v1`, apiKey });
  const g = await generateText({ model: openai(model), system, prompt: "Hi", maxOutputTokens: 6, temperature: 0,
    maxRetries: 0 });
  check("ai generateText (responses): text and usage", typeof g.text === "string" && g.text.length > 0 &&
    g.finishReason === "length" && g.usage.outputTokens === 6 && g.usage.inputTokens > 32, JSON.stringify(g.usage));
  const g2 = await generateText({ model: openai(model), system, prompt: "Hi", maxOutputTokens: 6, temperature: 0,
    maxRetries: 0 });
  check("ai generateText (responses): cached input tokens", g2.usage.cachedInputTokens >= 32 && g2.text === g.text,
    JSON.stringify(g2.usage));
  // the next turn sends the previous assistant message back (by item_reference: store defaults to true)
  const g3 = await generateText({ model: openai(model), maxOutputTokens: 2, maxRetries: 0,
    messages: [{ role: "user", content: "Hi" }, ...g.response.messages, { role: "user", content: "More" }] });
  check("ai generateText (responses): a second turn with the first's messages", g3.usage.outputTokens === 2);
  const none = await generateText({ model: openai(model), prompt: "Hi", maxRetries: 0, temperature: 0 });
  check("ai generateText (responses): no maxOutputTokens, up to max_model_len",
    none.usage.inputTokens + none.usage.outputTokens === maxLen, JSON.stringify(none.usage));
  const s = streamText({ model: openai(model), prompt: "Hello", maxOutputTokens: 5, maxRetries: 0 });
  let text = "";
  for await (const d of s.textStream) text += d;
  const su = await s.usage;
  check("ai streamText (responses): text and usage", text.length > 0 && (await s.finishReason) === "length" &&
    su.outputTokens === 5, JSON.stringify(su));
  const withTool = await generateText({ model: openai(model), prompt: "Weather in Paris?", maxOutputTokens: 4,
    maxRetries: 0, tools: { weather: tool({ description: "The weather in a city",
      inputSchema: z.object({ city: z.string() }), execute: async ({ city }) => `sunny in ${city}` }) } });
  check("ai generateText (responses) with a function tool: served", withTool.usage.outputTokens >= 1 &&
    Array.isArray(withTool.toolCalls));
  const chat = await generateText({ model: openai.chat(model), prompt: "Hi", maxOutputTokens: 4, maxRetries: 0 });
  check("ai generateText (openai.chat)", chat.usage.outputTokens === 4 && chat.text.length > 0);
});

await step("ai sdk: @ai-sdk/openai-compatible", async () => {
  const hearth = createOpenAICompatible({ name: "hearth", baseURL: `${url}/v1`, apiKey, includeUsage: true });
  const g = await generateText({ model: hearth(model), prompt: "Hi", maxOutputTokens: 6, maxRetries: 0 });
  check("ai generateText (compatible)", g.text.length > 0 && g.usage.outputTokens === 6 && g.finishReason === "length",
    JSON.stringify(g.usage));
  const s = streamText({ model: hearth(model), prompt: "Hi", maxOutputTokens: 5, maxRetries: 0 });
  let text = "";
  for await (const d of s.textStream) text += d;
  check("ai streamText (compatible)", text.length > 0 && (await s.usage).outputTokens === 5);
});

console.log(`RESULT passed=${passed} failed=${failed}`);
process.exit(failed === 0 ? 0 : 1);
