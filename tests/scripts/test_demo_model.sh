#!/usr/bin/env bash
# The shipped demo model (models/fortune-demo) against its reference, written by the
# training script with transformers in float64 on the bf16 weights (expected.safetensors):
#  - `hearth eval` with f32 KV: logits at every position and the greedy continuations;
#  - the reference prompts' texts (kept in the file's metadata) tokenized by hearth give
#    the ids Hugging Face tokenizers gave, and the chat prompt is what hearth's template
#    renders for the same conversation;
#  - `hearth generate` from text, greedy, prints the reference's greedy continuation.
# The last two need python3 (standard library, installed by scripts/deps.sh) to read the file.
set -u
bin=${HEARTH_BIN:-${BUILD:-build}/hearth}
dir=${HEARTH_DEMO_MODEL:-models/fortune-demo}
ex=$dir/expected.safetensors
passed=0; failed=0
ok() { passed=$((passed + 1)); echo "ok   $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }

if out=$("$bin" eval --model "$dir" --expected "$ex" --kv-dtype f32 2>&1); then
  ok "eval f32 KV: $(tail -n 1 <<<"$out")"
else
  fail "eval f32 KV"; echo "$out"
fi

if ! command -v python3 >/dev/null 2>&1; then
  echo "FAIL python3 is missing (scripts/deps.sh installs it)"
  echo "RESULT passed=$passed failed=$((failed + 1))"
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# One file per prompt: pN.text (raw bytes), pN.ids and pN.greedy (space-separated).
python3 - "$ex" "$tmp" <<'EOF'
import json, struct, sys
path, out = sys.argv[1], sys.argv[2]
with open(path, "rb") as f:
    raw = f.read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
body = raw[8 + n:]
def ints(name):
    t = head[name]
    assert t["dtype"] == "I32", name
    a, b = t["data_offsets"]
    return struct.unpack("<%di" % ((b - a) // 4), body[a:b])
for p in json.loads(head["__metadata__"]["prompts"]):
    i = p["prompt"]
    with open(f"{out}/p{i}.text", "wb") as f:
        f.write(p["text"].encode())
    for what in ("input_ids", "greedy"):
        with open(f"{out}/p{i}.{'ids' if what == 'input_ids' else what}", "w") as f:
            f.write(" ".join(map(str, ints(f"p{i}.{what}"))))
EOF
n=$(ls "$tmp"/p*.text 2>/dev/null | wc -l)
[ "$n" -ge 1 ] || fail "no prompts read from $ex"

for ((i = 0; i < n; i++)); do
  got=$("$bin" tokenize --model "$dir" - <"$tmp/p$i.text" 2>&1)
  if [ "$got" = "$(cat "$tmp/p$i.ids")" ]; then ok "p$i: hearth's token ids are the reference's"
  else fail "p$i: tokenize gave '$got', the reference used '$(cat "$tmp/p$i.ids")'"; fi
done

# The chat prompt p2 is the template's rendering of one user turn.
printf '[{"role":"user","content":"Tell me something about cats."}]' >"$tmp/conv.json"
if "$bin" template --model "$dir" --messages "$tmp/conv.json" >"$tmp/rendered" 2>&1 && cmp -s "$tmp/rendered" "$tmp/p2.text"; then
  ok "chat template renders the reference's chat prompt byte for byte"
else
  fail "chat template: rendered $(od -c "$tmp/rendered" | head -n 3)"
fi

# Text in, text out: greedy generation equals the reference's greedy tokens, decoded.
for i in 1 2; do
  want=$("$bin" tokenize --model "$dir" --decode $(cat "$tmp/p$i.greedy") 2>&1)
  prompt=$(cat "$tmp/p$i.text"; printf x) # keeps a trailing newline
  got=$("$bin" generate --model "$dir" --prompt "${prompt%x}" --temperature 0 --max-tokens 12 \
        --ignore-eos --kv-dtype f32 --threads 2 2>/dev/null)
  if [ "$got" = "$want" ]; then ok "p$i: generate (greedy) continues as the reference: $(printf %q "$got")"
  else fail "p$i: generate gave $(printf %q "$got"), the reference $(printf %q "$want")"; fi
done

echo "RESULT passed=$passed failed=$failed"
