// Differential test of hearth's chat templates against @huggingface/jinja (the pinned oracle).
//
// For the Qwen3 template of tests/data/qwen3/tokenizer_config.json and the upstream Qwen3 template
// (tests/data/qwen3/chat_template_upstream.jinja) it renders, with the oracle and with
// `hearth template`, the chat cases of tests/data/qwen3/vectors.json and a few hundred generated
// conversations (seeded: system prompt or not, multi-turn with <think> blocks in the history,
// reasoning_content, enable_thinking false/true/unset, tool calls with object or string arguments,
// tool results, content as text parts), and compares the bytes.
//
// The request sent to hearth is the raw OpenAI-style request; the oracle gets the context that
// Hugging Face transformers would build from it (built here independently: text parts joined with
// "\n", null content -> "", tools or null, eos_token from the config, enable_thinking when given).
//
// Generated texts avoid the two places where the oracle departs from Python Jinja2 (see
// tests/data/qwen3/SOURCE.md): no whitespace other than "\n" at the edges that strip('\n')
// touches, and no integral floats in JSON.
//
// usage: node tests/oracle/template_diff.mjs HEARTH_BIN [--cases N] [--seed S] [--dump N]
//        [--python [--edges]]
// --python compares with Python Jinja2 instead (tests/oracle/jinja2_render.py, needs python3 with
// jinja2; not used by `make test`), and --edges then also puts arbitrary whitespace at the edges
// of texts, where Python and the npm oracle differ.
// Prints one line per failure and ends with "RESULT passed=N failed=N".
import { Template } from "@huggingface/jinja";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..", "..");
const dataDir = path.join(root, "tests", "data", "qwen3");

const args = process.argv.slice(2);
const hearth = args[0];
if (!hearth) {
  console.error("usage: node template_diff.mjs HEARTH_BIN [--cases N] [--seed S]");
  process.exit(2);
}
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : dflt;
};
const nCases = opt("--cases", 150);
const seed = opt("--seed", 20250601);
const dump = opt("--dump", 0); // print the first N requests and renders (to look at what is tested)
const python = args.includes("--python");
const edges = python && args.includes("--edges");

// ------------------------------------------------------------------ seeded generator
let state = seed >>> 0;
function rand() {
  // mulberry32
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (xs) => xs[Math.floor(rand() * xs.length)];
const chance = (p) => rand() < p;
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

const WORDS = [
  "hello", "world", "the", "quick", "brown", "fox", "weather", "Paris", "tomorrow", "answer",
  "42", "3.14", "naïve", "café", "résumé", "Ελληνικά", "русский", "中文", "日本語のテキスト", "한국어",
  "emoji🤖", "👨‍👩‍👧", "🇫🇷", "x=1;", "{\"k\": [1, 2]}", "'quoted'", "\"double\"", "back\\slash",
  "a\tb", "<b>bold</b>", "<tool_call>", "</tool_call>", "<|im_start|>", "{{ not a tag }}",
  "{% raw %}", "100%", "C:\\path\\file", "line\u2028sep", "zero\u200bwidth", "tab\there",
  "∑x²", "→", "—", "«»", "€", "\u007f", "ctrl\u0001char", "end.",
];

// Text whose first and last characters are not whitespace; inside: spaces, tabs, newlines.
// With --edges, any whitespace may surround it.
function text(minWords = 1, maxWords = 12) {
  const n = int(minWords, maxWords);
  let s = "";
  for (let i = 0; i < n; i++) {
    if (i) s += pick([" ", " ", " ", "  ", "\n", "\n\n", " \t "]);
    s += pick(WORDS);
  }
  if (edges) {
    const edge = () => pick(["", "", " ", "\t", " \n", "\n ", "\u00a0", "\n\t\n", "\u3000"]);
    s = edge() + s + edge();
  }
  return s;
}

// Optional run of newlines (the only whitespace both engines strip the same way).
const nl = () => "\n".repeat(pick([0, 0, 1, 1, 2]));

function thinkContent() {
  // an assistant reply with its reasoning in <think> tags, as models emit it
  const forms = [
    () => `<think>${nl()}${text()}${nl()}</think>${nl()}${text()}`,
    () => `<think>\n${text()}\n</think>\n\n${text()}`,
    () => `${text()}</think>${nl()}${text()}`, // reasoning without the opening tag
    () => `<think>\n\n</think>\n\n${text()}`,
    () => `<think>${text()}</think>`,
  ];
  return pick(forms)();
}

function jsonValue(depth = 0) {
  const kinds = depth > 2 ? ["s", "i", "f", "b", "n"] : ["s", "i", "f", "b", "n", "a", "o"];
  switch (pick(kinds)) {
    case "s":
      return text(0, 4);
    case "i":
      return int(-100000, 100000);
    case "f":
      return pick([0.5, -2.25, 3.14159, 1234.5678, 0.001, 99.99]);
    case "b":
      return chance(0.5);
    case "n":
      return null;
    case "a":
      return Array.from({ length: int(0, 3) }, () => jsonValue(depth + 1));
    default: {
      const o = {};
      for (let i = int(0, 3); i > 0; i--) o[pick(["city", "unit", "days", "query", "nested", "k_" + int(0, 99)])] = jsonValue(depth + 1);
      return o;
    }
  }
}

const TOOL_NAMES = ["get_weather", "search", "calculator", "read_file", "send_email"];

function toolSchema(name) {
  return {
    type: "function",
    function: {
      name,
      description: text(2, 8),
      parameters: {
        type: "object",
        properties: {
          query: { type: "string", description: text(1, 5) },
          limit: { type: "integer", minimum: 1, maximum: int(2, 50), default: int(1, 5) },
          ratio: { type: "number", default: pick([0.5, 0.25, 2.5]) },
          unit: { type: "string", enum: ["celsius", "fahrenheit"] },
          options: { type: "object", properties: { deep: { type: "boolean" } } },
        },
        required: chance(0.5) ? ["query"] : [],
      },
    },
  };
}

function toolCall(name) {
  const argsObj = {};
  for (let i = int(0, 3); i > 0; i--) argsObj[pick(["query", "limit", "unit", "city", "options"])] = jsonValue(1);
  const asString = chance(0.4);
  const fn = { name, arguments: asString ? JSON.stringify(argsObj) : argsObj };
  if (chance(0.15)) return fn; // no "function" wrapper (the template accepts both)
  return { id: "call_" + int(1000, 9999), type: "function", function: fn };
}

function contentField(s) {
  // a string, or the same text as parts (flattened with "\n")
  if (!chance(0.25)) return s;
  const parts = s.split("\n");
  if (parts.length > 1 && chance(0.7)) return parts.map((t) => ({ type: "text", text: t }));
  return [{ type: "text", text: s }];
}

function conversation() {
  const msgs = [];
  const tools = chance(0.35) ? Array.from({ length: int(1, 3) }, (_, i) => toolSchema(TOOL_NAMES[i])) : null;
  if (chance(0.6)) msgs.push({ role: "system", content: contentField(text(1, 8)) });
  const turns = int(1, 4);
  for (let t = 0; t < turns; t++) {
    let user = text();
    if (chance(0.1)) user = `<tool_response>\n${text()}\n</tool_response>`;
    msgs.push({ role: "user", content: contentField(user) });
    if (chance(0.05)) msgs.push({ role: "system", content: text() });
    const last = t === turns - 1;
    if (last && chance(0.5)) break; // end on the user: the usual generation request
    if (tools && chance(0.5)) {
      // assistant calls tools, tools answer, assistant concludes
      const calls = Array.from({ length: int(1, 2) }, () => toolCall(pick(TOOL_NAMES)));
      const m = { role: "assistant", tool_calls: calls };
      const c = pick(["", null, text(), thinkContent(), undefined]);
      if (c !== undefined) m.content = c;
      if (chance(0.2)) m.reasoning_content = `${nl()}${text()}${nl()}`;
      msgs.push(m);
      for (const call of calls) msgs.push({ role: "tool", tool_call_id: call.id, content: chance(0.3) ? JSON.stringify(jsonValue(1)) : text() });
      if (!last || chance(0.5)) msgs.push({ role: "assistant", content: chance(0.5) ? thinkContent() : text() });
    } else {
      const m = { role: "assistant", content: chance(0.6) ? thinkContent() : text() };
      if (chance(0.2)) {
        m.reasoning_content = chance(0.8) ? `${nl()}${text()}${nl()}` : null;
        if (chance(0.5)) m.content = text();
      }
      msgs.push(m);
    }
  }
  const req = { messages: msgs };
  if (tools) req.tools = tools;
  const lastRole = msgs[msgs.length - 1].role;
  req.add_generation_prompt = lastRole === "assistant" ? chance(0.3) : chance(0.9);
  const et = pick(["unset", "unset", false, true]);
  if (et !== "unset") req.enable_thinking = et;
  return req;
}

// ------------------------------------------------------------------ HF-style context
const config = JSON.parse(readFileSync(path.join(dataDir, "tokenizer_config.json"), "utf8"));
const special = (v) => (v && typeof v === "object" ? v.content : v);

function flatten(content) {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  return content.map((p) => p.text).join("\n");
}

function context(req) {
  const messages = req.messages.map((m) => {
    const out = {};
    for (const [k, v] of Object.entries(m)) out[k] = k === "content" ? flatten(v) : v;
    if (!("content" in out)) out.content = "";
    return out;
  });
  const ctx = { messages, tools: req.tools ?? null, add_generation_prompt: !!req.add_generation_prompt };
  for (const k of ["bos_token", "eos_token", "pad_token", "unk_token"]) {
    const v = special(config[k]);
    if (typeof v === "string") ctx[k] = v;
  }
  if (typeof req.enable_thinking === "boolean") ctx.enable_thinking = req.enable_thinking;
  return ctx;
}

// ------------------------------------------------------------------ run
const templates = [
  { name: "qwen3 (tokenizer_config.json)", source: config.chat_template, cli: [] },
  {
    name: "qwen3 upstream",
    source: readFileSync(path.join(dataDir, "chat_template_upstream.jinja"), "utf8"),
    cli: ["--template", path.join(dataDir, "chat_template_upstream.jinja")],
  },
];

const cases = [];
const vectors = JSON.parse(readFileSync(path.join(dataDir, "vectors.json"), "utf8"));
for (const [i, v] of vectors.chat_template_vectors.entries()) {
  const req = { messages: v.messages, add_generation_prompt: v.add_generation_prompt };
  if (typeof v.enable_thinking === "boolean") req.enable_thinking = v.enable_thinking;
  cases.push({ id: `vectors.json chat case ${i}`, req, stored: v.rendered });
}
for (let i = 0; i < nCases; i++) cases.push({ id: `generated case ${i} (seed ${seed})`, req: conversation() });

let passed = 0;
let failed = 0;
let shown = 0;
function fail(what, detail) {
  failed++;
  if (shown++ < 8) console.log(`FAIL ${what}\n${detail}\n`);
  else console.log(`FAIL ${what}`);
}

function firstDiff(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

// Python Jinja2 renders everything in one process, up front.
let pyResults = null;
if (python) {
  const lines = [];
  for (const t of templates) for (const c of cases) lines.push(JSON.stringify({ template: t.source, context: context(c.req) }));
  const py = spawnSync("python3", [path.join(here, "jinja2_render.py")], { input: lines.join("\n") + "\n", maxBuffer: 1 << 30 });
  if (py.status !== 0) {
    console.log(`cannot run python3 jinja2_render.py: ${py.stderr}`);
    console.log("RESULT passed=0 failed=1");
    process.exit(1);
  }
  pyResults = py.stdout.toString("utf8").trim().split("\n").map((l) => JSON.parse(l));
}
let pyIndex = 0;

for (const t of templates) {
  const tmpl = new Template(t.source);
  for (const c of cases) {
    let expected;
    let oracleError = null;
    if (pyResults) {
      const res = pyResults[pyIndex++];
      if ("error" in res) oracleError = res.error;
      else expected = res.out;
    } else {
      try {
        expected = tmpl.render(context(c.req));
      } catch (e) {
        oracleError = String(e.message || e);
      }
    }
    if (!python && c.stored !== undefined && t.cli.length === 0 && expected !== c.stored) {
      fail(`${t.name}: ${c.id}: the oracle disagrees with vectors.json`, "");
      continue;
    }
    const run = spawnSync(hearth, ["template", "--model", dataDir, ...t.cli, "--messages", "-"], {
      input: JSON.stringify(c.req),
      maxBuffer: 64 << 20,
    });
    if (run.error) {
      fail(`${t.name}: ${c.id}: cannot run ${hearth}: ${run.error.message}`, "");
      continue;
    }
    if (oracleError !== null) {
      // both must refuse
      if (run.status === 0) fail(`${t.name}: ${c.id}: the oracle fails (${oracleError}) but hearth renders`, JSON.stringify(c.req));
      else passed++;
      continue;
    }
    if (run.status !== 0) {
      fail(`${t.name}: ${c.id}: hearth failed: ${run.stderr.toString().trim()}`, JSON.stringify(c.req));
      continue;
    }
    const got = run.stdout;
    const want = Buffer.from(expected, "utf8");
    if (Buffer.compare(got, want) !== 0) {
      const g = got.toString("utf8");
      const at = firstDiff(g, expected);
      fail(
        `${t.name}: ${c.id}: output differs at character ${at}`,
        `request: ${JSON.stringify(c.req)}\n  oracle: ${JSON.stringify(expected.slice(Math.max(0, at - 40), at + 60))}\n  hearth: ${JSON.stringify(g.slice(Math.max(0, at - 40), at + 60))}`,
      );
      continue;
    }
    if (dump && passed < dump) console.log(`--- ${t.name}: ${c.id}\n${JSON.stringify(c.req)}\n${expected}\n`);
    passed++;
  }
}
console.log(`RESULT passed=${passed} failed=${failed}`);
process.exit(failed ? 1 : 0);
