"""Kernel time a decode step, from ncu's CSV.

  ncu --csv --metrics gpu__time_duration.sum -k 'regex:^(attn|prep|combine|gemm|router|route|sort|grouped|rmsnorm|embed|sample|to_bf16|from_bf16|gather)' \
      --launch-skip SKIP --launch-count COUNT build/hearth generate --device cuda --model DIR --load-format dummy \
      --enforce-eager --temperature 0 --prompt-ids 1,2,3,4 --ignore-eos --max-tokens N > step.csv
  python3 tools/ncu_kernels.py step.csv STEPS

prints each (kernel, grid, block) with its time a step, calls a step and time a call,
largest first (COUNT = STEPS steps' launches; ncu runs at its locked base clock).
"""
import csv, sys, collections
f = sys.argv[1]; steps = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
rows = []
with open(f) as fh:
    lines = [l for l in fh if l.startswith('"')]
r = csv.DictReader(lines)
agg = collections.OrderedDict()
tot = 0.0
for row in r:
    if row.get("Metric Name") != "gpu__time_duration.sum": continue
    name = row["Kernel Name"].split("(")[0][:60]
    key = (name, row.get("Grid Size", ""), row.get("Block Size", ""))
    v = float(row["Metric Value"].replace(",", ""))
    unit = row.get("Metric Unit", "ns")
    if unit in ("usecond", "us"): v *= 1000
    elif unit in ("msecond", "ms"): v *= 1e6
    a = agg.setdefault(key, [0, 0.0]); a[0] += 1; a[1] += v; tot += v
print(f"total {tot/1000:.1f} us over {steps:g} steps: {tot/1000/steps:.1f} us a step")
for (n, g, b), (c, v) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"{v/1000/steps:9.1f} us/step {c/steps:7.1f} calls/step {v/c/1000:8.2f} us each  {n} grid{g} blk{b}")
