#!/usr/bin/env node
// Writes the tokenizer benchmark's text to stdout: documents of 1-8 KB separated by NUL bytes,
// about 4 MB in all: English prose (/usr/share/common-licenses), source code (this
// repository's C files), and seeded multilingual text (Latin with accents, Greek, Cyrillic,
// Arabic, Hebrew, Devanagari, Thai, CJK, Hangul, Japanese kana, emoji, digits, punctuation).
'use strict';
const fs = require('fs');
const path = require('path');

const TARGET = Number(process.argv[2] || 4 << 20);
const root = path.join(__dirname, '..');

function mulberry32(a) {
  return () => {
    a |= 0; a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rnd = mulberry32(12345);
const ri = (n) => Math.floor(rnd() * n);
const pick = (a) => a[ri(a.length)];

function readTree(dir, exts, out) {
  let ents = [];
  try { ents = fs.readdirSync(dir, { withFileTypes: true }); } catch { return out; }
  ents.sort((a, b) => (a.name < b.name ? -1 : 1));
  for (const e of ents) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) readTree(p, exts, out);
    else if (exts.some((x) => e.name.endsWith(x))) out.push(fs.readFileSync(p, 'utf8'));
  }
  return out;
}

// Splits text into documents of 1-8 KB at line ends.
function docs(text, budget) {
  const out = [];
  let used = 0, pos = 0;
  while (used < budget && text.length) {
    if (pos >= text.length) pos = 0;
    const want = 1024 + ri(7 * 1024);
    let end = text.indexOf('\n', pos + want);
    if (end < 0) end = text.length;
    const d = text.slice(pos, end + 1);
    pos = end + 1;
    if (!d.trim()) continue;
    out.push(d);
    used += Buffer.byteLength(d);
  }
  return out;
}

const english = readTree('/usr/share/common-licenses', [''], []).join('\n');
const code = readTree(path.join(root, 'src'), ['.c', '.h'], []).join('\n');

const SCRIPTS = [[0x61, 0x7a], [0xe0, 0xfc], [0x3b1, 0x3c9], [0x430, 0x44f], [0x627, 0x64a], [0x5d0, 0x5ea],
  [0x915, 0x939], [0xe01, 0xe2e], [0x4e00, 0x4fff], [0xac00, 0xae00], [0x3041, 0x3096], [0x30a1, 0x30fa]];
const EMOJI = ['😀', '🤖', '👍🏽', '👨‍👩‍👧', '🇫🇷', '❤️', '✨', '🎉'];
function multilingual(budget) {
  let s = '';
  while (Buffer.byteLength(s) < budget) {
    const sc = pick(SCRIPTS);
    const cjk = sc[0] >= 0x3041;
    let sentence = '';
    for (let w = 3 + ri(12); w--;) {
      let word = '';
      for (let k = 1 + ri(cjk ? 4 : 9); k--;) word += String.fromCodePoint(sc[0] + ri(sc[1] - sc[0] + 1));
      sentence += word + (cjk && ri(2) ? '' : ' ');
      if (ri(15) === 0) sentence += pick(EMOJI) + ' ';
      if (ri(12) === 0) sentence += String(ri(100000)) + ' ';
    }
    s += sentence.trim() + pick(['. ', '! ', '? ', '。', '، ', '\n', '\n\n']);
  }
  return s;
}

const all = [
  ...docs(english, TARGET * 0.4),
  ...docs(code, TARGET * 0.3),
  ...docs(multilingual(TARGET * 0.3 + 8192), TARGET * 0.3),
];
process.stdout.write(all.map((d) => d.replace(/\0/g, '')).join('\0'));
