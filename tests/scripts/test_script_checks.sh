#!/usr/bin/env bash
# The script tests assert what they say: no `check NAME [ … ] && more` (nor `|| more`, `| more`)
# in tests/scripts/*.sh.  `check NAME COMMAND ARGS...` runs one command; the shell runs what
# follows `&&` after check has already counted the result, and ignores its status, so that
# part is never asserted.  A compound condition goes to `check_all NAME 'CONDITION'` (or, in
# the scripts whose check evaluates a string, inside the string).  The lint itself is checked
# on a sample that has the pattern.  Ends with "RESULT passed=N failed=N".
set -u
cd "$(dirname "$0")/../.."
passed=0; failed=0
lint() { # FILES...: prints "FILE:LINE: ..." per check whose command line goes on after it
  python3 - "$@" <<'EOF'
import re, sys

def scan(s):
    """Top-level control operators of shell text s: (offset, op); and whether s ends inside a
    quote or $( )."""
    stack, ops, j = [], [], 0
    while j < len(s):
        c, top = s[j], (stack[-1] if stack else None)
        if top == "'":
            if c == "'": stack.pop()
        elif top == '"':
            if c == "\\": j += 1
            elif c == '"': stack.pop()
            elif s.startswith("$(", j): stack.append("("); j += 1
        else:
            if c == "\\": j += 1
            elif c in "'\"": stack.append(c)
            elif s.startswith("$(", j) or (c == "(" and top == "("): stack.append("("); j += 1 if c == "$" else 0
            elif c == ")" and top == "(": stack.pop()
            elif c == "#" and not stack and (j == 0 or s[j - 1] in " \t\n;"):
                k = s.find("\n", j); j = len(s) if k < 0 else k; continue
            elif not stack and c in "&|;\n":
                op = s[j:j + 2] if s[j:j + 2] in ("&&", "||", ";;") else c
                ops.append((j, op)); j += len(op); continue
        j += 1
    return ops, bool(stack)

bad = 0
for fn in sys.argv[1:]:
    lines = open(fn, encoding="utf-8", errors="replace").read().split("\n")
    i = 0
    while i < len(lines):
        start, text = i, lines[i]
        while True:  # a logical line: continuations and open quotes joined
            while text.endswith("\\") and i + 1 < len(lines):
                i += 1; text = text[:-1] + " " + lines[i]
            ops, open_ = scan(text)
            if not open_ or i + 1 >= len(lines): break
            i += 1; text += "\n" + lines[i]
        i += 1
        # each simple command of the line: the text between top-level operators
        bounds = [(-1, None)] + ops + [(len(text), None)]
        for (a, op_before), (b, op_after) in zip(bounds, bounds[1:]):
            cmd = text[a + len(op_before):b] if op_before else text[:b]
            if re.match(r"\s*(then\s+|else\s+|do\s+|!\s+)?check(_all)?\s", cmd) and op_after in ("&&", "||", "|"):
                bad += 1
                print("%s:%d: %s after check: %s" % (fn, start + 1, op_after, " ".join(cmd.split())[:100]))
sys.exit(1 if bad else 0)
EOF
}
sample=$(mktemp)
trap 'rm -f "$sample"' EXIT
cat >"$sample" <<'EOF'
check "a" [ "$x" = 1 ] && grep -q y file
check "b" [ "$x" = 1 ] || \
  grep -q y file
check "c" cmd | grep -q y
check_all "d" '[ "$x" = 1 ] && grep -q "a|b" file'
check "e" bash -c "[ 1 = 1 ] && true"; echo fine
cond && ok "f" || fail "f"
if x; then check "g" [ 1 = 1 ] && y; fi
EOF
out=$(lint "$sample")
if [ "$(grep -c . <<<"$out")" = 4 ] && grep -q ':1: &&' <<<"$out" && grep -q ':2: ||' <<<"$out" &&
   grep -q ':4: |' <<<"$out" && grep -q ':8: &&' <<<"$out"; then
  passed=$((passed + 1)); echo "ok   the lint finds the pattern in a sample (4 of 4, none in the good lines)"
else
  failed=$((failed + 1)); echo "FAIL the lint on the sample"; echo "$out"
fi
if out=$(lint tests/scripts/*.sh); then
  passed=$((passed + 1)); echo "ok   no check in tests/scripts/*.sh is followed by && / || / |"
else
  failed=$((failed + 1)); echo "FAIL checks whose condition is only partly asserted:"; echo "$out"
fi
echo "RESULT passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
