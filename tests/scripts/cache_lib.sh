# Sourced by test_disk_cache.sh and test_host_cache.sh: the prompts' run and comparison
# over the N token-id prompts in $tmp/prompt0.. on the server at $port.

# run_all TAG [SALT]: every prompt once, in turn; the output (tokens, logprobs) of prompt i
# in $tmp/TAG.i, its usage.cached_tokens in $tmp/TAG.i.cached.  The replies are read by
# one node process after the requests, not one a reply (a node start is ~0.1 s of CPU).
run_all() {
  local tag=$1 salt=${2:-}
  for i in $(seq 0 $((N - 1))); do
    local extra=""
    [ -n "$salt" ] && extra=",\"cache_salt\":\"$salt\""
    curl -sS -m 60 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"model\":\"tiny\",\"prompt\":$(cat "$tmp/prompt$i"),\"max_tokens\":8,\"temperature\":0,\"logprobs\":3,\"ignore_eos\":true$extra}" \
      >"$tmp/$tag.$i.json" 2>/dev/null
  done
  node -e 'const fs=require("fs"), [base, n]=process.argv.slice(1);
    for (let i = 0; i < Number(n); i++) {
      let out;
      try {
        const j=JSON.parse(fs.readFileSync(base+"."+i+".json","utf8"));
        if(!j.choices) out="ERROR "+JSON.stringify(j);
        else {
          out=JSON.stringify({text:j.choices[0].text,logprobs:j.choices[0].logprobs});
          fs.writeFileSync(base+"."+i+".cached", String(j.usage.prompt_tokens_details.cached_tokens));
        }
      } catch (e) { out="not json"; }
      fs.writeFileSync(base+"."+i, out+"\n");
    }' "$tmp/$tag" "$N" 2>/dev/null
}
same_as() { for i in $(seq 0 $((N - 1))); do cmp -s "$tmp/$2.$i" "$tmp/$1.$i" || return 1; done; }
