#!/usr/bin/env python3
"""Generates src/tokenizer/unicode_data.h: the normalization tables the tokenizer needs.

Input: the Unicode Character Database as Debian's `unicode-data` package installs it
(/usr/share/unicode: UnicodeData.txt, DerivedAge.txt, CompositionExclusions.txt).

Hugging Face tokenizers normalizes with the `unicode-normalization-alignments` crate, whose
tables are Unicode 9.0 (checked against the npm `tokenizers` oracle: marks added in 10.0 and
later are not reordered, composites added in 13.0 are not composed). To give the same text we
keep only the characters assigned in Unicode <= MAX_AGE. Decompositions, combining classes and
composition exclusions of assigned characters never change (Unicode stability policy), so the
newer database restricted this way is the 9.0 data.

Usage: python3 tools/gen_unicode_tables.py [UCD_DIR] > src/tokenizer/unicode_data.h
"""
import sys

UCD = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/unicode"
MAX_AGE = (9, 0)

S_BASE, L_BASE, V_BASE, T_BASE = 0xAC00, 0x1100, 0x1161, 0x11A7
L_COUNT, V_COUNT, T_COUNT = 19, 21, 28
S_COUNT = L_COUNT * V_COUNT * T_COUNT


def ranges(path):
    for line in open(path, encoding="utf-8"):
        line = line.split("#")[0].strip()
        if not line:
            continue
        fields = [f.strip() for f in line.split(";")]
        r = fields[0]
        if ".." in r:
            a, b = r.split("..")
            yield int(a, 16), int(b, 16), fields[1:]
        else:
            yield int(r, 16), int(r, 16), fields[1:]


def main():
    age_ok = set()
    for a, b, f in ranges(f"{UCD}/DerivedAge.txt"):
        major, minor = (int(x) for x in f[0].split("."))
        if (major, minor) <= MAX_AGE:
            age_ok.update(range(a, b + 1))

    ccc, decomp, compat = {}, {}, set()
    for line in open(f"{UCD}/UnicodeData.txt", encoding="utf-8"):
        f = line.rstrip("\n").split(";")
        cp = int(f[0], 16)
        if cp not in age_ok:
            continue
        if int(f[3]):
            ccc[cp] = int(f[3])
        if f[5]:
            parts = f[5].split()
            if parts[0].startswith("<"):
                compat.add(cp)
                parts = parts[1:]
            decomp[cp] = [int(p, 16) for p in parts]

    exclusions = set()
    for a, b, _ in ranges(f"{UCD}/CompositionExclusions.txt"):
        exclusions.update(c for c in range(a, b + 1) if c in age_ok)

    def full(cp, allow_compat):
        d = decomp.get(cp)
        if d is None or (cp in compat and not allow_compat):
            return [cp]
        out = []
        for c in d:
            out.extend(full(c, allow_compat))
        return out

    # Primary composites: canonical pairs not excluded, not singletons, not non-starter decompositions.
    compose = {}
    for cp, d in decomp.items():
        if cp in compat or len(d) != 2 or cp in exclusions:
            continue
        if ccc.get(cp, 0) or ccc.get(d[0], 0):
            continue
        compose[(d[0], d[1])] = cp
    second = {b for (_, b) in compose}

    def nfc_qc_no(cp):
        # A character that NFC never outputs: it decomposes canonically and is not recomposed.
        if cp in compat or cp not in decomp:
            return False
        return not (len(decomp[cp]) == 2 and compose.get(tuple(decomp[cp])) == cp)

    F_NFD, F_NFKD, F_NFC, F_NFKC = 1 << 8, 1 << 9, 1 << 10, 1 << 11
    props = {}
    for cp in set(ccc) | set(decomp) | second:
        v = ccc.get(cp, 0)
        has_c = cp in decomp and cp not in compat
        has_k = cp in decomp
        if v or has_c:
            v |= F_NFD
        if v & 0xFF or has_k:
            v |= F_NFKD
        if (v & 0xFF) or nfc_qc_no(cp) or cp in second:
            v |= F_NFC
        if (v & F_NFC) or has_k:
            v |= F_NFKC
        if v:
            props[cp] = v
    # Hangul: syllables decompose (NFD/NFKD only); medial vowels and trailing consonants compose.
    for s in range(S_BASE, S_BASE + S_COUNT):
        props[s] = props.get(s, 0) | F_NFD | F_NFKD
    for j in list(range(V_BASE, V_BASE + V_COUNT)) + list(range(T_BASE + 1, T_BASE + T_COUNT)):
        props[j] = props.get(j, 0) | F_NFC | F_NFKC

    # Two-stage property table over the whole code space.
    BLOCK = 128
    blocks, block_index, stage1 = [], {}, []
    for hi in range(0x110000 // BLOCK):
        blk = tuple(props.get(hi * BLOCK + i, 0) for i in range(BLOCK))
        if blk not in block_index:
            block_index[blk] = len(blocks)
            blocks.append(blk)
        stage1.append(block_index[blk])

    # Decompositions (full, recursive), canonical and compatibility, excluding Hangul.
    entries, data = [], []
    for cp in sorted(decomp):
        c = [] if cp in compat else full(cp, False)
        k = full(cp, True)
        co, ko = len(data), len(data) + len(c)
        data.extend(c)
        data.extend(k)
        entries.append((cp, co, len(c), ko, len(k)))
    assert max(e[2] for e in entries) < 256 and max(e[4] for e in entries) < 256
    assert len(data) < 65536

    out = sys.stdout
    w = out.write
    w("/* Generated by tools/gen_unicode_tables.py from the Unicode Character Database\n")
    w(" * (Debian unicode-data), restricted to characters assigned in Unicode %d.%d to match\n" % MAX_AGE)
    w(" * Hugging Face tokenizers' normalizer. Do not edit. Included by normalizer.c only. */\n")
    w("#ifndef HEARTH_TOKENIZER_UNICODE_DATA_H\n#define HEARTH_TOKENIZER_UNICODE_DATA_H\n\n")
    w("#include <stdint.h>\n\n")
    w("#define UNIDATA_BLOCK %d\n" % BLOCK)
    w("#define UNIDATA_F_NFD  0x%x /* may change under NFD */\n" % F_NFD)
    w("#define UNIDATA_F_NFKD 0x%x /* may change under NFKD */\n" % F_NFKD)
    w("#define UNIDATA_F_NFC  0x%x /* may change under NFC (NFC_QC No/Maybe or ccc != 0) */\n" % F_NFC)
    w("#define UNIDATA_F_NFKC 0x%x /* may change under NFKC */\n\n" % F_NFKC)

    def arr(ctype, name, vals, per=16, fmt="%d"):
        w("static const %s %s[%d] = {\n" % (ctype, name, len(vals)))
        for i in range(0, len(vals), per):
            w("    " + ", ".join(fmt % v for v in vals[i:i + per]) + ",\n")
        w("};\n\n")

    w("/* [0x110000 / UNIDATA_BLOCK] block number of each 128-code-point block */\n")
    arr("uint16_t", "unidata_stage1", stage1, 24)
    w("/* [n_blocks * UNIDATA_BLOCK] low byte: canonical combining class; high bits: UNIDATA_F_* */\n")
    arr("uint16_t", "unidata_stage2", [v for b in blocks for v in b], 16, "0x%x")
    w("struct unidata_decomp {\n    uint32_t cp;\n    uint16_t canon_off;  /* into unidata_decomp_data */\n")
    w("    uint8_t canon_len;   /* 0: compatibility mapping only */\n    uint8_t compat_len;\n")
    w("    uint16_t compat_off;\n};\n\n")
    w("/* [n] sorted by cp */\n")
    w("static const struct unidata_decomp unidata_decomps[%d] = {\n" % len(entries))
    for cp, co, cl, ko, kl in entries:
        w("    {0x%x, %d, %d, %d, %d},\n" % (cp, co, cl, kl, ko))
    w("};\n\n")
    w("/* [n] code points of the full decompositions */\n")
    arr("uint32_t", "unidata_decomp_data", data, 12, "0x%x")
    pairs = sorted(((a << 21) | b, c) for (a, b), c in compose.items())
    w("struct unidata_comp {\n    uint64_t key; /* first << 21 | second */\n    uint32_t cp;\n};\n\n")
    w("/* [n] sorted by key; Hangul is composed algorithmically */\n")
    w("static const struct unidata_comp unidata_comps[%d] = {\n" % len(pairs))
    for k, c in pairs:
        w("    {0x%xull, 0x%x},\n" % (k, c))
    w("};\n\n#endif\n")


if __name__ == "__main__":
    main()
