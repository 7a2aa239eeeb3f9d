#!/usr/bin/env node
// Writes tests/data/tokenizer/encode_cases_decoded.json: for every case of
// tests/data/qwen3/encode_cases.json, the text Hugging Face tokenizers (npm `tokenizers`,
// pinned in package.json) decodes its ids to, with and without skip_special_tokens.
// test_tokenizer checks hearth's decoding against it without needing node.
// usage (from the repository root): node tests/oracle/gen_tokenizer_decoded.js
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require(path.join(__dirname, 'node_modules', 'tokenizers'));
const root = path.join(__dirname, '..', '..');
const tok = Tokenizer.fromFile(path.join(root, 'tests/.cache/qwen3/tokenizer.json'));
const cases = JSON.parse(fs.readFileSync(path.join(root, 'tests/data/qwen3/encode_cases.json'), 'utf8')).cases;
(async () => {
  const out = [];
  for (const c of cases) out.push({ decoded: await tok.decode(c.ids, false), decoded_skip: await tok.decode(c.ids, true) });
  const doc = { source: 'HF tokenizers 0.23.2 (npm tokenizers) decode(ids, skipSpecialTokens) of tests/data/qwen3/encode_cases.json, in order', cases: out };
  fs.writeFileSync(path.join(root, 'tests/data/tokenizer/encode_cases_decoded.json'), JSON.stringify(doc) + '\n');
  console.log(`wrote ${out.length} cases`);
})();
