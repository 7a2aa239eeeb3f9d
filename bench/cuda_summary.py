#!/usr/bin/env python3
"""One line per figure of a cuda_bench JSON file (bench/cuda_kernels.sh's output)."""
import json
import sys

for path in sys.argv[1:]:
    txt = open(path).read()
    j = json.loads(txt[txt.index('{'):])
    print(path, j["device"]["name"], j["ceilings"])
    for g in j["gemm"]:
        vs = g["vs_cublas"]
        print("%-6s %-10s %-8s m=%-5d %-6s s=%d %9.1fus %5.0fGB/s %.2fbw %6.1fTF  cublas %s" % (
            g["variant"], g["model"], g["matrix"], g["m"], g.get("tile", "?"), g["split"], g["us"], g["gbs"],
            g["of_read_bw"], g["tflops"], "%.2f" % vs if vs is not None else "-"))
    for a in j["attention"]:
        print("%-6s %-7s heads %d/%d rows %d ctx %d: %.1fus %.0f GB/s (%.2f bw) %.2f TF" % (
            a["variant"], a["case"], a["heads"], a["kv_heads"], a["rows"], a["context"], a["us"], a["kv_gbs"],
            a["of_read_bw"], a["tflops"]))
