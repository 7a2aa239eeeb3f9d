#!/usr/bin/env bash
# Trains the demo model on a GPU machine (PyTorch, transformers 5.x and tokenizers
# installed; no network needed: the corpus is tools/train_demo_data/fortunes.jsonl).
#
#   bash tools/train_demo_gpu.sh OUTDIR            smoke check, then one run with the
#                                                  defaults of tools/train_demo.py
#   bash tools/train_demo_gpu.sh OUTDIR --sweep    smoke check, then each config of SWEEP
#                                                  below; the one with the lowest held-out
#                                                  perplexity is copied to OUTDIR
# Extra arguments after --sweep (or after OUTDIR) go to every training run.
# Then, on any machine with hearth built:
#   ./build/hearth eval --model OUTDIR --expected OUTDIR/expected.safetensors --kv-dtype f32
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: train_demo_gpu.sh OUTDIR [--sweep] [train_demo.py args]}
shift
sweep=0
if [ "${1:-}" = "--sweep" ]; then sweep=1; shift; fi
py=${PYTHON:-python3}
work=${TRAIN_DEMO_WORK:-$(mktemp -d)}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true

if [ -z "${SKIP_SMOKE:-}" ]; then  # SKIP_SMOKE=1 skips it
  echo "== smoke check"
  "$py" tools/train_demo.py --smoke --out "$work/smoke" "$@" >"$work/smoke.log" 2>&1 || { cat "$work/smoke.log"; exit 1; }
  tail -n 3 "$work/smoke.log"
fi

# name: arguments.  Each run's training is capped by --time-budget seconds.
# SWEEP_ONLY="name name" runs only those.
SWEEP=(
  "l6h256:--layers 6 --hidden 256 --ffn 768 --heads 4 --kv-heads 2 --steps 800 --dropout 0.1"
  "l8h256:--layers 8 --hidden 256 --ffn 768 --heads 4 --kv-heads 2 --steps 1000 --dropout 0.1"
  "l6h320:--layers 6 --hidden 320 --ffn 864 --heads 5 --kv-heads 1 --steps 1000 --dropout 0.1"
  "l6h256d2:--layers 6 --hidden 256 --ffn 768 --heads 4 --kv-heads 2 --steps 1000 --dropout 0.2"
  "l8h256d25:--layers 8 --hidden 256 --ffn 768 --heads 4 --kv-heads 2 --steps 1200 --dropout 0.25"
  "l6h320d3:--layers 6 --hidden 320 --ffn 864 --heads 5 --kv-heads 1 --steps 1200 --dropout 0.3"
  "l6h256d2s12:--layers 6 --hidden 256 --ffn 768 --heads 4 --kv-heads 2 --steps 1200 --dropout 0.2"
  "l8h256d25s14:--layers 8 --hidden 256 --ffn 768 --heads 4 --kv-heads 2 --steps 1400 --dropout 0.25"
)
if [ $sweep = 0 ]; then SWEEP=("default:"); fi
if [ -n "${SWEEP_ONLY:-}" ]; then
  keep=()
  for entry in "${SWEEP[@]}"; do
    for n in $SWEEP_ONLY; do [ "${entry%%:*}" = "$n" ] && keep+=("$entry"); done
  done
  SWEEP=("${keep[@]}")
fi
best=""; best_ppl=""
for entry in "${SWEEP[@]}"; do
  name=${entry%%:*}; args=${entry#*:}
  echo "== run $name: $args $*"
  # shellcheck disable=SC2086
  if ! "$py" tools/train_demo.py --out "$work/$name" $args "$@" 2>&1 | tee "$work/$name.log" | grep -E "^(model:|tokenizer:|epoch rows|time budget|training done|shipped|p[0-9]:|sample|step [0-9]+/)"; then
    echo "run $name failed"; tail -n 20 "$work/$name.log"; continue
  fi
  [ -f "$work/$name/summary.json" ] || { echo "run $name wrote no summary"; tail -n 20 "$work/$name.log"; continue; }
  ppl=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["val_ppl"])' "$work/$name/summary.json")
  echo "run $name: held-out ppl $ppl"
  if [ -z "$best" ] || "$py" -c 'import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)' "$ppl" "$best_ppl"; then
    best=$name; best_ppl=$ppl
    rm -rf "$out"; mkdir -p "$out"; cp "$work/$name"/* "$out"/
    echo "best so far: $name -> $out"
  fi
done
[ -n "$best" ] || { echo "no run succeeded"; exit 1; }
echo "== chosen: $best (held-out ppl $best_ppl) in $out"
