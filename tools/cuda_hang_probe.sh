#!/usr/bin/env bash
# Runs a command again and again until one run outlives STALL seconds (or TOTAL seconds
# pass), then records what the stuck process is doing before it kills it: the GPU's
# utilisation and power (a kernel that spins keeps the SMs busy; a host that waits on a
# lock leaves them idle), each thread's state, CPU share and kernel wait channel (a CUDA
# synchronisation spins in user space; a futex wait is a host lock), and every thread's
# stack by the toolkit's cuda-gdb, which also names the kernels on the GPU, their blocks
# and warps (else by gdb).  It found the GEMM hang of bench/notes/cuda.md (twenty-third
# session).
#
#   STALL=25 TOTAL=300 OUT=/tmp/probe tools/cuda_hang_probe.sh build/hearth bench throughput \
#       --device cuda --model DIR --load-format dummy --prompt-tokens 512 --output-tokens 128 --concurrency 64
#
# Writes OUT/summary.txt (one line a run, the findings of a stall) and OUT/runN.{out,err}.
# Exits 0 when no run stalled, 1 when one did, 2 on a usage error.
set -u
if [ $# -lt 1 ]; then
    echo "usage: [STALL=s] [TOTAL=s] [OUT=dir] $0 command [args...]" >&2
    exit 2
fi
STALL=${STALL:-25}
TOTAL=${TOTAL:-300}
OUT=${OUT:-/tmp/cuda_hang_probe}
mkdir -p "$OUT"
S=$OUT/summary.txt
: > "$S"
t0=$(date +%s)
i=0
while [ $(($(date +%s) - t0)) -lt "$TOTAL" ]; do
    i=$((i + 1))
    "$@" > "$OUT/run$i.out" 2> "$OUT/run$i.err" &
    pid=$!
    t=0
    while kill -0 "$pid" 2> /dev/null && [ "$t" -lt "$STALL" ]; do
        sleep 1
        t=$((t + 1))
    done
    if kill -0 "$pid" 2> /dev/null; then
        {
            echo "run $i: still running after $STALL s (pid $pid)"
            nvidia-smi --query-gpu=utilization.gpu,utilization.memory,power.draw,clocks.sm --format=csv 2>&1
            ps -L -o tid,stat,pcpu,wchan:28,comm -p "$pid" 2>&1
            for task in /proc/"$pid"/task/*; do
                echo "$(basename "$task"): $(cut -d' ' -f3,14,15 "$task/stat" 2> /dev/null) (state, utime, stime)"
            done
        } >> "$S"
        CG=$(command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2> /dev/null)
        if [ -n "$CG" ]; then
            timeout 60 "$CG" -p "$pid" -batch -ex 'info cuda kernels' -ex 'info cuda blocks' \
                -ex 'info cuda warps' -ex 'thread apply all bt 16' > "$OUT/gdb$i.txt" 2>&1
            echo "cuda-gdb: $OUT/gdb$i.txt" >> "$S"
        elif command -v gdb > /dev/null; then
            timeout 30 gdb -p "$pid" -batch -ex 'thread apply all bt 16' > "$OUT/gdb$i.txt" 2>&1
            echo "stacks: $OUT/gdb$i.txt" >> "$S"
        else
            echo "no cuda-gdb or gdb: no stacks" >> "$S"
        fi
        kill -9 "$pid" 2> /dev/null
        wait "$pid" 2> /dev/null
        exit 1
    fi
    wait "$pid"
    echo "run $i: exit $? after $t s" >> "$S"
done
exit 0
