// Load test of `hearth serve`: N concurrent streaming clients for a bounded time, each
// looping over requests that it either reads to the end, abandons mid-stream, or
// abandons before the first byte (mid-prefill, with a long prompt).  Afterwards the
// engine must be idle: no running or waiting sequence, no open prefix lease, every KV
// block free or held by the prefix cache; and the server must still answer.
//
// usage: node tests/e2e/load.mjs URL API_KEY MODEL SECONDS [CLIENTS]
// Prints checks and "RESULT passed=N failed=N".
const [url, apiKey, model, secondsArg, clientsArg] = process.argv.slice(2);
const seconds = Number(secondsArg || 20), clients = Number(clientsArg || 64);
const headers = { "Content-Type": "application/json", Authorization: `Bearer ${apiKey}` };
let passed = 0, failed = 0;
function check(name, cond, why = "") {
  if (cond) { passed++; console.log(`ok   ${name}`); }
  else { failed++; console.log(`FAIL ${name}${why ? ": " + why : ""}`); }
}
function rng(seed) { // mulberry32: the same run every time
  return () => { seed |= 0; seed = (seed + 0x6d2b79f5) | 0; let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t; return ((t ^ (t >>> 14)) >>> 0) / 4294967296; };
}

const st = { full: 0, midStream: 0, early: 0, errors: 0, statuses: {}, bad: [] };
const deadline = Date.now() + seconds * 1000;
const decoder = new TextDecoder();

async function client(id) {
  const rnd = rng(id + 1);
  while (Date.now() < deadline) {
    const mode = rnd(); // < 0.25 early abort, < 0.6 mid-stream abort, else read to the end
    const chat = rnd() < 0.5;
    const words = "lorem ipsum dolor sit amet ".repeat(5 + Math.floor(rnd() * 80));
    const body = chat
      ? { model, stream: true, max_tokens: 8 + Math.floor(rnd() * 40), temperature: 1, seed: id,
          messages: [{ role: "system", content: "shared system prompt for the load test. ".repeat(4) },
                     { role: "user", content: words }] }
      : { model, stream: true, max_tokens: 8 + Math.floor(rnd() * 40), prompt: words,
          stream_options: { include_usage: true } };
    const ctrl = new AbortController();
    let timer = null;
    if (mode < 0.25) timer = setTimeout(() => ctrl.abort(), Math.floor(rnd() * 20));
    const chunksBeforeAbort = 1 + Math.floor(rnd() * 4);
    try {
      const res = await fetch(`${url}/v1/${chat ? "chat/completions" : "completions"}`,
        { method: "POST", headers, body: JSON.stringify(body), signal: ctrl.signal });
      st.statuses[res.status] = (st.statuses[res.status] || 0) + 1;
      if (res.status !== 200) { st.errors++; st.bad.push(`${res.status} ${await res.text()}`); continue; }
      const reader = res.body.getReader();
      let text = "", n = 0, abandoned = false;
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
        if (mode >= 0.25 && mode < 0.6 && ++n >= chunksBeforeAbort) { ctrl.abort(); abandoned = true; break; }
      }
      if (abandoned) st.midStream++;
      else if (text.endsWith("data: [DONE]\n\n") && !text.includes('"error"')) st.full++;
      else { st.errors++; st.bad.push(`stream ended badly: ${text.slice(-200)}`); }
    } catch (e) {
      if (e.name === "AbortError") st.early++;
      else { st.errors++; st.bad.push(String(e)); }
    } finally {
      if (timer) clearTimeout(timer);
    }
  }
}

await Promise.all(Array.from({ length: clients }, (_, i) => client(i)));
console.log(`load: ${JSON.stringify({ ...st, bad: st.bad.slice(0, 5) })}`);
check("load: every response was 200", Object.keys(st.statuses).every((k) => k === "200"), JSON.stringify(st.statuses));
check("load: no stream ended badly", st.errors === 0, st.bad.slice(0, 3).join(" | "));
check("load: streams completed, and both kinds of disconnect happened", st.full > 0 && st.midStream > 0 && st.early > 0,
  JSON.stringify({ full: st.full, midStream: st.midStream, early: st.early }));

// The engine frees what the disconnected clients held within a step or so.
let stats = null, idle = false;
for (let i = 0; i < 150 && !idle; i++) {
  await new Promise((r) => setTimeout(r, 100));
  stats = await (await fetch(`${url}/v1/stats`, { headers })).json();
  idle = stats.running === 0 && stats.waiting === 0 && stats.active_requests === 0 &&
    stats.prefix_cache.open_leases === 0 && stats.blocks_used <= stats.prefix_cache.blocks_held;
}
check("load: afterwards no sequence runs or waits, no lease is open, every block is free or cached", idle,
  JSON.stringify(stats));
check("load: block accounting adds up", stats && stats.blocks_free + stats.blocks_used === stats.blocks_total);
const metrics = await (await fetch(`${url}/metrics`)).text();
const disc = Number((metrics.match(/^hearth_client_disconnects_total (\d+)$/m) || [])[1]);
check("load: disconnects are counted", disc > 0, `hearth_client_disconnects_total ${disc}`);
const after = await fetch(`${url}/v1/completions`, { method: "POST", headers,
  body: JSON.stringify({ model, prompt: "still there?", max_tokens: 3 }) });
const aj = await after.json();
check("load: the server still answers", after.status === 200 && aj.usage?.completion_tokens === 3, JSON.stringify(aj));
console.log(`RESULT passed=${passed} failed=${failed}`);
process.exit(failed ? 1 : 0);
