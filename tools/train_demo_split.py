#!/usr/bin/env python3
"""Splits fortune(6) files (text between lines holding only `%`) into JSON lines
{"file": NAME, "text": FORTUNE}. Skips the binary index files (*.dat), the UTF-8 link
copies (*.u8), `ascii-art` (drawings, not language) and any offensive set (off/)."""
import json
import os
import sys

SKIP = {"ascii-art"}


def fortunes_of(path):
    with open(path, "rb") as f:
        raw = f.read().decode("utf-8", errors="replace")
    cur = []
    for line in raw.split("\n"):
        if line.rstrip() == "%":
            yield cur
            cur = []
        else:
            cur.append(line.rstrip())
    yield cur


def main():
    src, dst = sys.argv[1], sys.argv[2]
    n = 0
    with open(dst, "w", encoding="utf-8") as out:
        for name in sorted(os.listdir(src)):
            path = os.path.join(src, name)
            if name.endswith((".dat", ".u8")) or name in SKIP or not os.path.isfile(path):
                continue
            for lines in fortunes_of(path):
                while lines and not lines[-1]:
                    lines.pop()
                while lines and not lines[0]:
                    lines.pop(0)
                text = "\n".join(lines)
                if text.strip():
                    out.write(json.dumps({"file": name, "text": text}, ensure_ascii=False) + "\n")
                    n += 1
    print(f"{n} fortunes -> {dst}")


if __name__ == "__main__":
    main()
