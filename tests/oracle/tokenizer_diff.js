#!/usr/bin/env node
// Differential test of hearth's tokenizer against Hugging Face tokenizers (npm `tokenizers`,
// the Rust engine), the live oracle. Generates seeded strings of many kinds, encodes them with
// the oracle, and compares with `hearth tokenize --batch-hex` (one process per tokenizer file);
// decodes the oracle's ids with both and compares the text too. Invalid UTF-8 byte strings
// (which the oracle cannot take) must make hearth fail with the byte offset where the bad
// sequence starts, known by construction.
//
// Besides the Qwen3 tokenizer.json, a few variants of it exercise what Qwen3 does not use:
// added-token flags (lstrip, rstrip, single_word, normalized), NFKC/NFD normalizers, the
// legacy "a b" merges form with ignore_merges, every Split behaviour, invert, ByteLevel with
// its own regex and prefix space, a TemplateProcessing post-processor, the null decoder.
//
// usage: node tokenizer_diff.js HEARTH_BIN TOKENIZER_JSON [--seed N] [--count N]
// Prints "RESULT passed=N failed=N" (one check per tokenizer variant and per kind of check).
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');
const { Tokenizer } = require('tokenizers');

const argv = process.argv.slice(2);
if (argv.length < 2) {
  console.error('usage: node tokenizer_diff.js HEARTH_BIN TOKENIZER_JSON [--seed N] [--count N]');
  process.exit(2);
}
const HEARTH = argv[0];
const BASE_JSON = argv[1];
let seed = 20240611;
let count = 3000;
for (let i = 2; i < argv.length; i++) {
  if (argv[i] === '--seed') seed = Number(argv[++i]);
  else if (argv[i] === '--count') count = Number(argv[++i]);
}

// ------------------------------------------------------------------ PRNG ----
function mulberry32(a) {
  return function () {
    a |= 0; a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
let rnd = mulberry32(seed);
const ri = (n) => Math.floor(rnd() * n);
const pick = (a) => a[ri(a.length)];
const cp = (c) => String.fromCodePoint(c);
const range = (a, b) => cp(a + ri(b - a + 1));

// ------------------------------------------------------------ generators ----
const SPECIALS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>', '<|object_ref_start|>', '<|box_end|>',
  '<|vision_pad|>', '<tool_call>', '</tool_call>', '<|fim_prefix|>', '<|fim_pad|>', '<|repo_name|>',
  '<|file_sep|>', '<tool_response>', '</tool_response>', '<think>', '</think>'];
const PARTIAL = ['<|im_', '<think', '</think', '|>', '<|', '<<|im_end|>', '<|im_end|>>', '<thinkk>', '<|IM_END|>'];
const WORDS = ['the', 'The', 'THE', 'hello', 'world', 'don\'t', 'I\'m', 'we\'LL', 'it\'s', 'You\'RE', 'they\'ve',
  'naïve', 'café', 'Straße', 'résumé', 'Ünïcödé', 'tokenizer', 'supercalifragilistic', 'x', 'a', 'I'];
const SCRIPTS = [
  [0x41, 0x5a], [0x61, 0x7a], [0xc0, 0x17f], [0x370, 0x3ff], [0x400, 0x4ff], [0x530, 0x58f],
  [0x5d0, 0x5ea], [0x620, 0x64a], [0x900, 0x97f], [0x980, 0x9ff], [0xb80, 0xbff], [0xe01, 0xe5b],
  [0x10a0, 0x10ff], [0x1200, 0x137f], [0x3041, 0x3096], [0x30a1, 0x30fa], [0x4e00, 0x9fff],
  [0xac00, 0xd7a3], [0x1100, 0x11ff], [0xff01, 0xff5e], [0x1d400, 0x1d7ff], [0x20000, 0x2a6df],
];
// Blocks new in Unicode 15.0-17.0: where regex engines of different Unicode versions disagree.
const RECENT = [[0x1e030, 0x1e08f], [0x11f00, 0x11f59], [0x1e4d0, 0x1e4f9], [0x2ebf0, 0x2ee5d], [0x10d40, 0x10d8f],
  [0x105c0, 0x105f3], [0x11bc0, 0x11be1], [0x13460, 0x143fa], [0x11380, 0x113e2], [0x16d40, 0x16d79],
  [0x1cc00, 0x1ccf9], [0x1d2c0, 0x1d2d3], [0x10940, 0x10959], [0x16ea0, 0x16edf], [0x323b0, 0x3347f],
  [0x1e5d0, 0x1e5ff], [0x116d0, 0x116e3], [0x1f8b0, 0x1f8bb]];
const SPACES = [' ', ' ', ' ', '  ', '\t', '\n', '\r\n', '\n\n', '\r', '\u00a0', '\u2000', '\u2003', '\u200a',
  '\u3000', '\u2028', '\u2029', '\u0085', '\u000b', '\u000c', '\u1680', '\u202f', '\u205f', '\ufeff',
  '\u200b', '\u180e', '\u200c', '\u200d'];
const EMOJI = ['😀', '🤖', '👍', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇫🇷', '🇯🇵', '1️⃣', '❤️', '🧑🏿‍💻', '👩‍❤️‍💋‍👨',
  '🫠', '🦀', '☃', '✨', '🐈‍⬛', '🏴󠁧󠁢󠁳󠁣󠁴󠁿'];
const MARKS = [[0x300, 0x36f], [0x483, 0x489], [0x591, 0x5bd], [0x64b, 0x65f], [0x93c, 0x94d],
  [0x1ab0, 0x1abe], [0x1dc0, 0x1dff], [0x20d0, 0x20f0], [0xfe20, 0xfe2f], [0x302a, 0x302f]];
const NORM = ['e\u0301', 'A\u030a', '\u212b', '\u2126', '\u0958', '\u0344', 'o\u0308\u0304', 'a\u0328\u0301',
  'a\u0301\u0328', '\u1100\u1161\u11a8', '\u1100\u1161', '\uac00\u11a8', 'ﬁ', 'ﬃ', '①', '㌀', 'Ｈｅｌｌｏ',
  '²', '½', 'ℌ', '\u0b47\u0b3e', '\u0cc6\u0cc2\u0cd5', '\u1025\u102e', 'ḍ\u0307', 'q\u0307\u0323',
  '\u00c5\u0301', 'ǆ', 'ﷺ', '\u0f73', '\u0f81', '\u1e9b\u0323', 'ϒ\u0301', '\u2000', '\u01c4'];
const DIGITS = () => {
  const k = ri(5);
  if (k === 0) return String(ri(1e9));
  if (k === 1) return '0'.repeat(1 + ri(30));
  if (k === 2) return [...Array(1 + ri(6))].map(() => range(0x660, 0x669)).join('');
  if (k === 3) return [...Array(1 + ri(6))].map(() => range(0xff10, 0xff19)).join('');
  return pick(['²³', '½', '⅓', 'Ⅻ', '①②', '१२३', '๑๒', '3.14159', '1,000,000', '-42', '1e-9']);
};
const PUNCT = '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~¡¿«»“”‘’—–…•§¶©®™°±×÷€£¥₹∑√∞≠≤≥←→⇒∀∃∈';
const CODE = ['def f(x):\n    return x * 2\n', 'for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}',
  '{"key": [1, 2, {"nested": null}]}', '<div class="a">text</div>', 'SELECT * FROM t WHERE id = 3;',
  '    \n    \n', '#!/bin/sh\necho "$HOME"\n', 'x = y if z else w  # comment', '\\n\\t\\u00e9'];

function randomCodePoint() {
  for (;;) {
    const plane = ri(10) < 8 ? 0 : ri(3);
    const c = plane * 0x10000 + ri(0x10000);
    if (c >= 0xd800 && c <= 0xdfff) continue;
    if (c > 0x10ffff) continue;
    return cp(c);
  }
}

const CHUNKS = [
  () => pick(SPECIALS), () => pick(PARTIAL), () => pick(WORDS), () => pick(WORDS) + pick(SPECIALS),
  () => pick(SPECIALS) + pick(WORDS), () => { const s = pick(SCRIPTS); let o = ''; for (let k = 1 + ri(8); k--;) o += range(s[0], s[1]); return o; },
  () => pick(SPACES), () => pick(SPACES).repeat(1 + ri(12)), () => pick(EMOJI), () => pick(EMOJI) + pick(EMOJI),
  () => { const m = pick(MARKS); let o = pick(['a', 'e', 'ह', 'ا', 'ก', 'α', '']); for (let k = 1 + ri(4); k--;) o += range(m[0], m[1]); return o; },
  () => pick(NORM), () => DIGITS(), () => PUNCT[ri(PUNCT.length)], () => PUNCT[ri(PUNCT.length)].repeat(1 + ri(5)),
  () => pick(CODE), () => '\'' + pick(['s', 't', 're', 've', 'm', 'll', 'd', 'S', 'RE', 'Ll', 'D', 'ſ']),
  () => randomCodePoint(), () => randomCodePoint() + randomCodePoint(),
  () => { const b = pick(RECENT); let o = ''; for (let k = 1 + ri(4); k--;) o += range(b[0], b[1]); return o + pick(['\'s', ' x', '1', '']); },
  () => pick(['\\ud83d', '\\uDE00', '\\ud800\\udc00', '\\x80', '\\u{1F600}']), // surrogates written as escapes
  () => String.fromCharCode(0xd800 + ri(0x800)), // a real lone surrogate: UTF-8 conversion makes it U+FFFD
  () => '\u0000', () => pick(['\u0001', '\u001f', '\u007f', '\u0080', '\u009f']),
];

function genString() {
  const k = ri(100);
  if (k < 3) { // long runs
    return pick(['a', ' ', '\n', '1', '!', 'é', '中', '🤖', 'ab', ' \n', '<|im_end|>']).repeat(50 + ri(600));
  }
  if (k < 6) { // long mixed text
    let s = '';
    while (s.length < 500 + ri(3000)) s += pick(CHUNKS)() + (ri(3) ? ' ' : '');
    return s;
  }
  let s = '';
  for (let n = 1 + ri(7); n--;) {
    s += pick(CHUNKS)();
    if (ri(3) === 0) s += ' ';
  }
  return s;
}

// Invalid UTF-8: valid prefix + an ill-formed sequence + anything; the error is at the prefix end.
const BAD = [[0x80], [0xbf], [0xc0, 0x80], [0xc1, 0xbf], [0xe0, 0x80, 0x80], [0xed, 0xa0, 0x80],
  [0xed, 0xbf, 0xbf], [0xf0, 0x80, 0x80, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xf5, 0x80, 0x80, 0x80],
  [0xff], [0xfe], [0xc3], [0xe4, 0xb8], [0xf0, 0x9f, 0xa4], [0xc3, 0x41], [0xe4, 0x41, 0x41]];
function genInvalid() {
  const prefix = Buffer.from(ri(4) ? genString().slice(0, 40) : '', 'utf8');
  const bad = Buffer.from(pick(BAD));
  const suffix = Buffer.from(ri(2) ? genString().slice(0, 20) : '', 'utf8');
  return { bytes: Buffer.concat([prefix, bad, suffix]), offset: prefix.length };
}

// ---------------------------------------------------------------- variants ----
function variants(base) {
  const v = [];
  v.push({ name: 'qwen3', json: null, count, invalid: 200 });

  const flags = JSON.parse(base);
  flags.normalizer = { type: 'Sequence', normalizers: [{ type: 'NFKC' }] };
  for (const t of flags.added_tokens) {
    if (t.content === '<think>') { t.lstrip = true; t.rstrip = true; }
    if (t.content === '</think>') t.rstrip = true;
    if (t.content === '<tool_call>') t.single_word = true;
    if (t.content === '<|im_start|>') t.lstrip = true;
    if (t.content === '<|fim_prefix|>') t.normalized = true;
  }
  let next = 151669;
  const add = (content, o) => flags.added_tokens.push(Object.assign({ id: next++, content, single_word: false,
    lstrip: false, rstrip: false, normalized: true, special: false }, o));
  add('ﬁle', { single_word: true });            // normalized pattern is "file"
  add('hello', { single_word: true, lstrip: true });
  add('Ｗorld', { rstrip: true });               // NFKC makes it "World"
  add(' spaced', { normalized: false, lstrip: true, rstrip: true });
  add('naïve', { special: true, normalized: false });
  add('<|im_end|>x', { normalized: false });     // longer than <|im_end|>: leftmost-longest
  v.push({ name: 'added-flags+nfkc', json: JSON.stringify(flags), count: 400, words: ['file', 'ﬁle', 'hello',
    'Hello', 'World', 'Ｗｏｒｌｄ', ' spaced', 'naïve', 'nai\u0308ve', '<|im_end|>x', 'xhellox', 'hello_', 'ﬁles'] });

  const legacy = JSON.parse(base);
  legacy.model.merges = legacy.model.merges.map((m) => m[0] + ' ' + m[1]);
  legacy.model.ignore_merges = true;
  legacy.normalizer = { type: 'NFD' };
  v.push({ name: 'legacy-merges+ignore_merges+nfd', json: JSON.stringify(legacy), count: 300 });

  const splits = JSON.parse(base);
  splits.normalizer = null;
  splits.pre_tokenizer = { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { Regex: '\\s+' }, behavior: 'MergedWithNext', invert: false },
    { type: 'Split', pattern: { String: 'a' }, behavior: 'MergedWithPrevious', invert: false },
    { type: 'Split', pattern: { Regex: '\\p{N}' }, behavior: 'Contiguous', invert: true },
    { type: 'Split', pattern: { String: '.' }, behavior: 'Removed', invert: false },
    { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  ] };
  splits.decoder = null;
  v.push({ name: 'split-behaviours+bytelevel-regex+null-decoder', json: JSON.stringify(splits), count: 300 });

  const tmpl = JSON.parse(base);
  tmpl.pre_tokenizer = { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { Regex: '[aeiou]' }, behavior: 'Removed', invert: true },
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
  ] };
  tmpl.post_processor = { type: 'Sequence', processors: [
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
    { type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '<|im_start|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
        { SpecialToken: { id: '<|endoftext|>', type_id: 0 } }],
      pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { '<|im_start|>': { id: '<|im_start|>', ids: [151644], tokens: ['<|im_start|>'] },
        '<|endoftext|>': { id: '<|endoftext|>', ids: [151643], tokens: ['<|endoftext|>'] } } },
  ] };
  v.push({ name: 'removed-invert+template-processing', json: JSON.stringify(tmpl), count: 200 });
  return v;
}

// ------------------------------------------------------------------ runner ----
const tmpdir = fs.mkdtempSync(path.join(os.tmpdir(), 'hearth-tokdiff-'));
let passed = 0, failed = 0;
function check(ok, name, details) {
  if (ok) { passed++; console.log(`ok   ${name}`); } else { failed++; console.log(`FAIL ${name}`); for (const d of details) console.log('  ' + d); }
}
const show = (b) => JSON.stringify(b.toString('utf8')).slice(0, 160);

function runHearth(args) {
  return execFileSync(HEARTH, ['tokenize', ...args], { maxBuffer: 1 << 30, encoding: 'utf8' }).split('\n');
}

async function runVariant(v, base) {
  rnd = mulberry32(seed + v.name.length * 7919);
  let file = BASE_JSON;
  if (v.json) {
    file = path.join(tmpdir, v.name + '.json');
    fs.writeFileSync(file, v.json);
  }
  const tok = Tokenizer.fromString(v.json || base);
  const cases = [];
  for (let k = 0; k < v.count; k++) {
    let s = genString();
    if (v.words && ri(2)) s = pick(v.words) + (ri(2) ? pick(SPACES) : '') + s + pick(v.words);
    const bytes = Buffer.from(s, 'utf8');          // lone surrogates become U+FFFD here
    cases.push({ bytes, text: bytes.toString('utf8') });
  }
  for (const c of cases) c.ids = (await tok.encode(c.text)).getIds();
  const invalid = [];
  for (let k = 0; k < (v.invalid || 0); k++) invalid.push(genInvalid());

  const hexFile = path.join(tmpdir, v.name + '.hex');
  fs.writeFileSync(hexFile, cases.map((c) => c.bytes.toString('hex')).concat(invalid.map((c) => c.bytes.toString('hex'))).join('\n') + '\n');
  const out = runHearth(['--tokenizer', file, '--batch-hex', hexFile]);

  const bad = [];
  cases.forEach((c, k) => {
    const want = c.ids.join(' ');
    if (out[k] !== want && bad.length < 8) bad.push(`text ${show(c.bytes)}\n    oracle ${want}\n    hearth ${out[k]}`);
    if (out[k] !== want) bad.count = (bad.count || 0) + 1;
  });
  check(!bad.count, `${v.name}: encode ${cases.length} strings`, bad.count ? [`${bad.count} mismatches; first:`, ...bad] : []);

  if (invalid.length) {
    const badInv = [];
    invalid.forEach((c, k) => {
      const line = out[cases.length + k] || '';
      const m = /^ERR invalid argument: .*byte offset (\d+)/.exec(line);
      if (!m || Number(m[1]) !== c.offset) badInv.push(`bytes ${c.bytes.toString('hex').slice(0, 80)} want offset ${c.offset}, got ${line.slice(0, 120)}`);
    });
    check(badInv.length === 0, `${v.name}: invalid UTF-8 rejected with its offset (${invalid.length})`, badInv.slice(0, 8));
  }

  // decode: the oracle's ids, with and without special tokens
  const idsFile = path.join(tmpdir, v.name + '.ids');
  fs.writeFileSync(idsFile, cases.map((c) => c.ids.join(' ')).join('\n') + '\n');
  for (const skip of [false, true]) {
    const dec = runHearth(['--tokenizer', file, ...(skip ? ['--skip-special'] : []), '--batch-decode', idsFile]);
    const badDec = [];
    for (let k = 0; k < cases.length; k++) {
      const want = Buffer.from(await tok.decode(cases[k].ids, skip), 'utf8').toString('hex');
      if (dec[k] !== want) badDec.push(`ids ${cases[k].ids.slice(0, 20).join(' ')}\n    oracle ${want.slice(0, 120)}\n    hearth ${String(dec[k]).slice(0, 120)}`);
    }
    check(badDec.length === 0, `${v.name}: decode${skip ? ' skip_special' : ''} ${cases.length}`, [`${badDec.length} mismatches`, ...badDec.slice(0, 6)]);
  }
}

(async () => {
  const base = fs.readFileSync(BASE_JSON, 'utf8');
  try {
    for (const v of variants(base)) await runVariant(v, base);
  } catch (e) {
    failed++;
    console.log('FAIL exception: ' + (e.stack || e));
  } finally {
    fs.rmSync(tmpdir, { recursive: true, force: true });
  }
  console.log(`RESULT passed=${passed} failed=${failed}`);
  process.exit(failed ? 1 : 0);
})();
