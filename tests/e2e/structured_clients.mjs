// Structured outputs through the clients people use, against `hearth serve`: the Vercel AI
// SDK's generateObject (@ai-sdk/openai-compatible, structured outputs on) and LangChain's
// withStructuredOutput (json_schema and function-calling methods), all with zod schemas, all
// pinned in tests/oracle/package.json. The model has random weights, so an answer can run out
// of tokens: each check tries up to four seeds and needs one complete object; every object a
// client returns must satisfy the zod schema (the clients parse and validate it themselves,
// and the test validates again).
//
// usage: node tests/e2e/structured_clients.mjs URL MODEL
// Prints "ok NAME" / "FAIL NAME: why" and ends with "RESULT passed=N failed=N".
import { createRequire } from "node:module";

const require = createRequire(new URL("../oracle/package.json", import.meta.url));
const { generateObject } = await import(require.resolve("ai"));
const { createOpenAICompatible } = await import(require.resolve("@ai-sdk/openai-compatible"));
const { z } = await import(require.resolve("zod"));
const { ChatOpenAI } = await import(require.resolve("@langchain/openai"));

const [url, model] = process.argv.slice(2);
let passed = 0, failed = 0;
function check(name, cond, why = "") {
  if (cond) { passed++; console.log(`ok   ${name}`); }
  else { failed++; console.log(`FAIL ${name}${why ? ": " + why : ""}`); }
}

const person = z.object({
  name: z.string().max(8),
  age: z.number().int().min(0).max(99),
  member: z.boolean(),
  color: z.enum(["red", "green", "blue"]),
});

async function firstComplete(name, attempt) {
  const errors = [];
  for (const seed of [1, 2, 3, 4]) {
    try { return { value: await attempt(seed), errors }; }
    catch (e) { errors.push(`seed ${seed}: ${String(e?.message ?? e).slice(0, 160)}`); }
  }
  return { value: undefined, errors };
}

{
  const provider = createOpenAICompatible({ name: "hearth", baseURL: `${url}/v1`, apiKey: "none",
                                            supportsStructuredOutputs: true });
  const r = await firstComplete("ai sdk", async (seed) =>
    (await generateObject({ model: provider(model), schema: person, schemaName: "person",
                            prompt: "Describe a person.", seed, temperature: 1, maxOutputTokens: 120, maxRetries: 0 })).object);
  check("AI SDK generateObject (json_schema) returns an object of the schema",
        r.value !== undefined && person.safeParse(r.value).success, JSON.stringify(r));
}
for (const method of ["jsonSchema", "functionCalling"]) {
  const r = await firstComplete(`langchain ${method}`, async (seed) => {
    const llm = new ChatOpenAI({ model, apiKey: "none", configuration: { baseURL: `${url}/v1` }, temperature: 1,
                                 maxTokens: 160, maxRetries: 0, modelKwargs: { seed } });
    return await llm.withStructuredOutput(person, { name: "person", method }).invoke("Describe a person.");
  });
  check(`LangChain withStructuredOutput (${method}) returns an object of the schema`,
        r.value !== undefined && person.safeParse(r.value).success, JSON.stringify(r));
}

console.log(`RESULT passed=${passed} failed=${failed}`);
process.exit(failed ? 1 : 0);
