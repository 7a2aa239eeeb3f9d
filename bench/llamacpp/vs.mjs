// llama.cpp's side of bench/vs-llamacpp.sh: the same measurement as `hearth bench
// forward` (prefill of a 512-token prompt, then decode at batch 1 from context 512)
// on a GGUF of the same weights, through node-llama-cpp's prebuilt CPU binary with
// the same thread count.  Decode includes llama.cpp's greedy sampling; hearth's
// forward benchmark does not sample.  Prints JSON.
//
// usage: node bench/llamacpp/vs.mjs MODEL.gguf [threads=2] [prompt=512] [decode=32] [repeat=3]
import {getLlama} from "node-llama-cpp";

const [gguf, threads = "2", prompt = "512", decode = "32", repeat = "3"] = process.argv.slice(2);
const nt = +threads, np = +prompt, nd = +decode, nr = +repeat;
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath: gguf, gpuLayers: 0});
const ctx = await model.createContext({contextSize: np + nd + 16, batchSize: np, threads: nt, sequences: 1});
const seq = ctx.getSequence();

let s = 7;
const toks = [];
for (let i = 0; i < np; i++) {
  s = (s * 1103515245 + 12345) % 2147483648;
  toks.push(s % 150000);
}
const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
const pre = [], dec = [];
for (let r = -1; r < nr; r++) {
  await seq.clearHistory();
  let t = performance.now();
  await seq.evaluateWithoutGeneratingNewTokens(toks);
  const p = (performance.now() - t) / 1000;
  let n = 0;
  t = performance.now();
  for await (const tk of seq.evaluate([toks[np - 1]], {temperature: 0})) {
    void tk;
    if (++n >= nd) break;
  }
  const d = (performance.now() - t) / 1000;
  if (r >= 0) { /* the first round warms the pages */
    pre.push(p);
    dec.push(d / n);
  }
}
const out = {
  engine: "llama.cpp (node-llama-cpp 3.21.1, prebuilt CPU binary)",
  threads: nt,
  prefill: {tokens: np, seconds: +median(pre).toFixed(4), tokens_per_s: +(np / median(pre)).toFixed(1)},
  decode: {batch: 1, context: np, tokens: nd, step_ms: +(median(dec) * 1e3).toFixed(2),
           tokens_per_s: +(1 / median(dec)).toFixed(1)},
};
console.log(JSON.stringify(out));
await ctx.dispose();
await model.dispose();
