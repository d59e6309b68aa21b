#!/usr/bin/env bash
# One device call on a lent GPU machine (docs/gpu.md, "A session on a lent GPU"): everything a session with a
# GPU has to measure, in one command that ends within the device tool's 10-minute limit.
#
#   - the CUDA tests (`pytest -m cuda tests/test_cuda.py`), beside the trainings;
#   - the `gpu` preset on IMDB in several sizes and schedules, each with a 10% validation hold-out, side by side
#     on the one GPU; the variant with the best hold-out accuracy (after the n-gram score's weight and the
#     temperature) is the only one whose test split is read;
#   - the default preset (`sentiment train --data IMDB`) with a short search budget, timed by stage;
#   - the GPU's utilisation and memory every 2 s.
#
# Run from the repository root with IMDB in .imdb/ (Hub layout, ignored by git) and the packages the machine
# lacks as wheels in .whl/ (README of the device tool; gensim as a zip without its tests):
#   bash bench/gpu_session.sh            # $OUT: summary.txt and logs.tar.gz
# Every job runs under `timeout`, so the script ends by about DEADLINE seconds even when a training does not.
set -u
T0=$(date +%s)
OUT="${OUT:-/tmp/gpu_out}"
DEADLINE="${DEADLINE:-540}"         # seconds from start by which everything has ended
TRAIN_UNTIL=$((DEADLINE - 75))      # trainings are stopped here, leaving time for the test evaluations
LOG="$OUT/logs"
mkdir -p "$LOG"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=true
export PYTHONPATH="$PWD"
now() { echo $(( $(date +%s) - T0 )); }
stamp() { while IFS= read -r line; do printf '%4d %s\n' "$(now)" "$line"; done; }
sentiment() { python3 -m sentiment_cli "$@"; }

# ---------------------------------------------------------------- the machine and the packages it lacks
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c "import sys, torch, pyarrow, numpy; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'pyarrow', pyarrow.__version__, 'numpy', numpy.__version__)"
    SITE=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    [ -n "${SKIP_SETUP:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade .whl/*.whl 2>&1 | tail -3
    [ -n "${SKIP_SETUP:-}" ] || python3 -m zipfile -e .whl/gensim-trim.zip "$SITE"
    python3 -c "import datasets, gensim, fastapi, uvicorn, optuna, cleanlab; print('imports ok; datasets', datasets.__version__)"
} 2>&1 | stamp | tee "$LOG/setup.log"

nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader -l 2 > "$LOG/gpu_util.csv" 2>&1 &
SMI=$!

# ---------------------------------------------------------------- the jobs, side by side
DATA="${DATA:-$PWD/.imdb}"
read -r -a EXTRA <<< "${GPU_SESSION_EXTRA:-}"   # more --set overrides for every training (a smoke test on a slice)
CK="$PWD/.gpu_ck"
rm -rf "$CK"; mkdir -p "$CK"
left() { echo $(( TRAIN_UNTIL - $(now) )); }

timeout -k 10 -s INT $(( DEADLINE - 40 - $(now) )) python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_cuda.py \
    > "$LOG/cuda_tests.log" 2>&1 &
PYTEST=$!

HOLDOUT=(--set data.validation_fraction=0.1)
variant() {   # NAME, then --set overrides of the gpu preset
    local name=$1; shift
    timeout -k 20 -s INT "$(left)" python3 -m sentiment_cli train --data "$DATA" --config gpu "${HOLDOUT[@]}" \
        --set training.init_from="$CK/pretrained-$name" --output "$CK/$name" "$@" "${EXTRA[@]}" 2>&1 | stamp > "$LOG/train_$name.log"
}
TRAINS=()
variant A & TRAINS+=($!)                                         # the preset as shipped (d_model 256, 4 layers)
variant B --set pretrain.epochs=16 & TRAINS+=($!)                # twice the pretraining
variant C --set model.d_model=384 --set model.n_heads=6 --set model.n_layers=6 --set model.d_ff=1536 \
          --set training.lr=3e-4 & TRAINS+=($!)                  # wider and deeper
( timeout -k 20 -s INT "$(left)" python3 -m sentiment_cli train --data "$DATA" --time-budget 240 --output "$CK/default" \
    --set training.init_from="$CK/pretrained-default" "${EXTRA[@]}" 2>&1 | stamp > "$LOG/train_default.log" ) &
TRAINS+=($!)
wait "${TRAINS[@]}"

# ---------------------------------------------------------------- the hold-out chooses; test read once
python3 - "$CK" > "$LOG/holdout.txt" <<'PY'
import json, sys
from pathlib import Path
rows = []
for d in sorted(Path(sys.argv[1]).iterdir()):
    m = d / "metrics.json"
    if d.name.startswith("pretrained") or not m.is_file():
        continue
    r = json.loads(m.read_text())
    cal, cfg = r.get("calibration", {}), r["config"]
    rows.append((d.name, cal.get("accuracy"), cal.get("nll"), r.get("best_validation_accuracy"),
                 cfg["model"]["d_model"], cfg["model"]["n_layers"], cfg["pretrain"]["epochs"],
                 round(r.get("wall_time_seconds", 0)), r.get("device_name")))
print("variant  holdout_acc  holdout_nll  encoder_val_acc  d_model  layers  pretrain_epochs  fit_seconds  device")
for row in rows:
    print("  ".join(str(x) for x in row))
gpu = [r for r in rows if r[0] != "default" and r[1] is not None]
if gpu:
    print("CHOSEN", max(gpu, key=lambda r: (r[1], -r[2]))[0])
PY
cat "$LOG/holdout.txt"
BEST=$(awk '/^CHOSEN/ {print $2}' "$LOG/holdout.txt")
EVALS=()
for name in $BEST default; do
    [ -f "$CK/$name/metrics.json" ] || continue
    timeout -k 5 $(( DEADLINE - 5 - $(now) )) python3 -m sentiment_cli eval --split test --checkpoint "$CK/$name" \
        --json > "$LOG/test_$name.json" 2> "$LOG/test_$name.err" & EVALS+=($!)
done
[ ${#EVALS[@]} -gt 0 ] && wait "${EVALS[@]}"
wait "$PYTEST"
kill $SMI 2>/dev/null

# ---------------------------------------------------------------- what comes back
for d in "$CK"/*/; do
    n=$(basename "$d"); [ -f "$d/metrics.json" ] && cp "$d/metrics.json" "$LOG/metrics_$n.json"
    [ -f "$d/config.json" ] && cp "$d/config.json" "$LOG/config_$n.json"
done
{
    echo "== wall: $(now) s"
    cat "$LOG/setup.log"
    echo "== cuda tests"; tail -5 "$LOG/cuda_tests.log"
    echo "== hold-out"; cat "$LOG/holdout.txt"
    for f in "$LOG"/test_*.json; do
        [ -s "$f" ] && python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1].rsplit('/',1)[1], 'test accuracy', d.get('accuracy'), 'ece', d.get('ece'))" "$f"
    done
    echo "== GPU utilisation (mean %, max MiB)"
    awk -F', ' '{gsub(/ %/,"",$2); gsub(/ MiB/,"",$3); s+=$2; n++; if ($3>m) m=$3} END {if (n) printf "%.1f%% over %d samples, %d MiB\n", s/n, n, m}' "$LOG/gpu_util.csv"
    for f in "$LOG"/train_*.log; do echo "== $(basename "$f")"; grep -v "━\|┃\|│\|┏\|┡\|└" "$f" | tail -14; done
} > "$OUT/summary.txt" 2>&1
tar czf "$OUT/logs.tar.gz" -C "$OUT" logs
cat "$OUT/summary.txt"
