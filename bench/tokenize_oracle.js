#!/usr/bin/env node
// The reference side of bench/tokenize.sh: Hugging Face tokenizers (npm `tokenizers`) on the
// same NUL-separated documents, encoded one after the other (one encode in flight: one thread
// works at a time). Prints one JSON object like tokenize_bench.
// usage: node tokenize_oracle.js TOKENIZER_JSON CORPUS [LOADS] [REPS]
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require(path.join(__dirname, '..', 'tests', 'oracle', 'node_modules', 'tokenizers'));

const [file, corpus] = process.argv.slice(2);
const loads = Number(process.argv[4] || 3), reps = Number(process.argv[5] || 3);
const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;

(async () => {
  const lt = [];
  let tok;
  for (let i = 0; i < loads; i++) {
    const t0 = process.hrtime.bigint();
    tok = Tokenizer.fromFile(file);
    lt.push(ms(t0));
  }
  lt.sort((a, b) => a - b);
  const buf = fs.readFileSync(corpus);
  const docs = buf.toString('utf8').split('\0');
  const bytes = buf.length - (docs.length - 1);
  let best = Infinity, nIds = 0, hash = 0n;
  for (let r = 0; r < reps; r++) {
    let h = 1469598103934665603n, cnt = 0;
    const ids = [];
    const t0 = process.hrtime.bigint();
    for (const d of docs) ids.push((await tok.encode(d)).getIds());
    const dt = ms(t0) / 1e3;
    for (const a of ids) {
      cnt += a.length;
      for (const x of a) h = ((h ^ BigInt(x)) * 1099511628211n) & 0xffffffffffffffffn;
    }
    if (dt < best) best = dt;
    nIds = cnt;
    hash = h;
  }
  console.log(JSON.stringify({
    engine: 'hf-tokenizers-npm', load_ms_min: +lt[0].toFixed(1), load_ms_median: +lt[loads >> 1].toFixed(1),
    docs: docs.length, bytes, ids: nIds, ids_fnv1a: hash.toString(16).padStart(16, '0'),
    encode_s: +best.toFixed(4), encode_mb_s: +(bytes / best / 1e6).toFixed(2),
  }));
})();
