#!/usr/bin/env bash
# BabyLM strict-small on one GPU in one command (docs/results/babylm.md):
# prepares the Wikipedia + Gutenberg mix on this machine's cores, times training (benchmarks/gpu_train_speed.py),
# trains the four strict-small recipes (configs/babylm/strict-small-{gpt-bert,gpt,bert,tta}.toml) one after another
# and scores each final model on BLiMP-dev, all within about 9 minutes of one H100. Uses the machine's own python3
# and torch (PYTHONPATH=src, no install; nothing is downloaded). Each part has its own time limit, so one that hangs
# leaves the others' results. Results go to $OUT as JSON (babylm.json gathers them); models stay in $WORK.
#
# The words budget: a full 100 M-word run does not fit in the minute or so each family gets here, so each family
# trains for the words that fit TRAIN_SECONDS at the step time gpu_train_speed.py measured for its recipe
# (benchmarks/babylm_plan.py; learning-rate schedule planned for that budget), and babylm.json reports the words
# actually seen. BABYLM_WORDS=N gives every family N words instead (100000000: the real strict-small budget, for
# a machine and a time limit that allow it). run.max_minutes stops a run that is slower than planned (it still
# exports its model).
#
# Across two jobs on the same machine (the full budget where a job's time limit is shorter than the run): the
# first with STOP_AT_STEP=N (run.stop_at_step: the run checkpoints and stops there) and SKIP_EVAL=1, the second with
# RESUME=1 (the data and the run in $WORK as they are; `pretrain --resume` continues it exactly) and the same words
# budget (BABYLM_WORDS), so that both plan the same schedule.
# Knobs (environment): OUT, WORK, DEVICE (cuda), DATA_ROOT (../shared/data or shared/data), BABYLM_CORPUS (default:
# the shared Wikipedia + Gutenberg; BabyLM's own train_10M/ folder works), BABYLM_TOKENIZER (default: the bundled
# gpt-two-hour 16 k WordPiece, trained on the same mix), BABYLM_FAMILIES, BABYLM_WORDS, TRAIN_SECONDS (50),
# BABYLM_SET (more --set overrides for every run), BENCH_ARGS (more gpu_train_speed.py arguments), BLIMP_DATA,
# SPEED_JSON (step times measured already, in gpu_train_speed.py's JSON shape: no benchmark here), PLAN_OVERHEAD (a real
# step over a timed one, 1.3), MAX_MINUTES (run.max_minutes, default 1.5 x TRAIN_SECONDS), BLIMP_LIMIT (pairs per paradigm; default all), BLIMP_METHODS (more `eval blimp --method`s to score
# each final model with after its own, e.g. "pll"), BLIMP_RAW (1: also score final-raw, the trained weights, when
# the recipe's moving average (optim.ema 0.999, debiased) made final the average; 0: not), EVAL_BATCH (rows a BLiMP forward pass: sentences, or for BERT's
# PLL one masked copy a piece; 2048, since a 12 x 384 model's pass over 256 short rows is too small to keep a GPU busy:
# the H200 run of 2026-11-28 (commit 2712760): its BERT PLL, some 800 k copies in batches of 256, ran past its 40-s limit), MARK_SCALE (the checkpoint marks times this; dry runs), and the
# limits PREP_LIMIT, BENCH_LIMIT, TRAIN_LIMIT, EVAL_LIMIT (seconds), NUM_WORKERS (data loader processes, 4), NPROC
# (GPUs to train on, 1), WHEELS (a folder of wheels carried to the machine, default .whl: installed into
# $WORK/site without an index or dependencies; benchmarks/gpu_wheels.sh fetches litgpt's for its baseline).
# What runs fast on the GPU without a knob: pinned host memory for every micro-batch (data.pin_memory, on by default
# on CUDA) and DataLoader workers prefetching the steps (NUM_WORKERS); in the benchmark, SDPA told is_causal (GPT) or
# no mask (unpadded BERT) so that flash can run (its JSON's "attention" says per case). The recipes' disentangled
# position bias keeps a masked SDPA call in training (docs/results/training-speed.md).
# The time, on one H100 (planned, not yet measured): environment 5 s, data 30 s, benchmark <= 150 s, then per family
# about 15 s to start, TRAIN_SECONDS of training, its model exports and BLiMP-dev (<= 75 s): about 9 minutes.
set -u
OUT=${OUT:-gpu-babylm}
WORK=${WORK:-${TMPDIR:-/tmp}/gpu-babylm-work}
DEVICE=${DEVICE:-cuda}
PY=${PYTHON:-python3}
mkdir -p "$OUT" "$WORK"
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
WHEELS=${WHEELS:-.whl}
if compgen -G "$WHEELS/*.whl" > /dev/null; then  # carried wheels (litgpt's baseline): installed beside, not over
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
    "$WHEELS"/*.whl && export PYTHONPATH=$PYTHONPATH:$WORK/site
  echo "wheels from $WHEELS installed into $WORK/site: $(ls "$WHEELS" | tr '\n' ' ')"
fi
if [ -z "${DATA_ROOT:-}" ]; then
  for d in ../shared/data shared/data; do [ -d "$d" ] && DATA_ROOT=$d && break; done
fi
DATA_ROOT=${DATA_ROOT:-../shared/data}
CORPUS=${BABYLM_CORPUS:-"$DATA_ROOT/enwiki-wikiextractor $DATA_ROOT/gutenberg-subset/*.txt.gz"}
TOKENIZER=${BABYLM_TOKENIZER:-src/maskplay/assets/gpt-two-hour/tokenizer.json}
FAMILIES=${BABYLM_FAMILIES:-gpt-bert gpt bert tta}
BLIMP_DATA=${BLIMP_DATA:-$DATA_ROOT/blimp-dev}
read -r -a EXTRA <<< "${BABYLM_SET:-}"
SETS=()
for s in "${EXTRA[@]}"; do SETS+=(--set "$s"); done

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  lscpu | grep -E "Model name|^CPU\(s\)"
  $PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# 1. the data, on every core of this machine (corpus globs expand here); a resumed run reads what is there
if [ "${RESUME:-0}" = 1 ] && [ -f "$WORK/data/summary.json" ]; then
  echo "prepare: resuming, $WORK/data as it is"
else
  # shellcheck disable=SC2086
  timeout "${PREP_LIMIT:-150}" $PY -m maskplay prepare --corpus $CORPUS --tokenizer "$TOKENIZER" --out "$WORK/data" \
    --workers "$(nproc)" --max-length 128 --overwrite --quiet > "$OUT/prepare.log" 2>&1
  echo "prepare exit $?"; tail -4 "$OUT/prepare.log"
fi
[ -f "$WORK/data/summary.json" ] && cp "$WORK/data/summary.json" "$OUT/prepare-summary.json"

# 2. throughput: GPT at GPT-2 small's shape and the 12 x 384 families against HuggingFace, and each recipe as
# `maskplay pretrain` runs it (the plan below reads those)
if [ -n "${SPEED_JSON:-}" ]; then  # timed already (gpu_one_call.sh): its step times, no benchmark here
  [ "$SPEED_JSON" -ef "$OUT/train-speed.json" ] || cp "$SPEED_JSON" "$OUT/train-speed.json"
  echo "train-speed from $SPEED_JSON"
else
  # shellcheck disable=SC2086
  timeout "${BENCH_LIMIT:-150}" $PY benchmarks/gpu_train_speed.py --device "$DEVICE" --recipe --warmup 2 --steps 8 \
    --out "$OUT/train-speed.json" ${BENCH_ARGS:-} > "$OUT/train-speed.log" 2>&1
  echo "train-speed exit $?"; tail -12 "$OUT/train-speed.log"
fi

# 3. each family's words budget for TRAIN_SECONDS of training
# shellcheck disable=SC2086
timeout 120 $PY benchmarks/babylm_plan.py plan --data "$WORK/data" --speed "$OUT/train-speed.json" \
  --seconds "$(( ${TRAIN_SECONDS:-50} * ${NPROC:-1} ))" --overhead "${PLAN_OVERHEAD:-1.3}" --mark-scale "${MARK_SCALE:-1}" ${BABYLM_WORDS:+--words "$BABYLM_WORDS"} \
  --families $FAMILIES --set "${EXTRA[@]}" --out "$OUT/plan.json" > "$OUT/plan.txt" 2> "$OUT/plan.log"
echo "plan exit $?"; cat "$OUT/plan.txt"

# 4. train and score each family, one after another (NPROC > 1: under torchrun, DDP over NCCL; the global batch
# and the words budget stay the same, and the plan assumes the step time divides by NPROC)
LAUNCH=($PY -m maskplay)
[ "${NPROC:-1}" -gt 1 ] && LAUNCH=($PY -m torch.distributed.run --standalone --nproc_per_node "$NPROC" -m maskplay)
MAX_MINUTES=${MAX_MINUTES:-$($PY -c "print(${TRAIN_SECONDS:-50} * 1.5 / 60)")}
while read -r fam steps words warmup marks; do
  MARKS=() RUN=()
  if [ "${RESUME:-0}" = 1 ] && [ -d "$WORK/$fam" ]; then RUN=(--resume); else rm -rf "${WORK:?}/$fam"; fi
  [ -n "${STOP_AT_STEP:-}" ] && RUN+=(--set "run.stop_at_step=$STOP_AT_STEP")
  [ "$marks" != "-" ] && MARKS=(--set "run.checkpoint_at_words=$marks")
  timeout "${TRAIN_LIMIT:-120}" "${LAUNCH[@]}" pretrain --config "configs/babylm/strict-small-$fam.toml" \
    --data "$WORK/data" --out "$WORK/$fam" --set "run.max_words=$words" --set "optim.max_steps=$steps" \
    --set "optim.warmup_steps=$warmup" --set "optim.cooldown_steps=$warmup" \
    --set "run.max_minutes=$MAX_MINUTES" --set run.eval_every=0 --set run.save_every=0 --set run.progress=false \
    --set run.tensorboard=false --set "run.device=$DEVICE" --set "data.num_workers=${NUM_WORKERS:-4}" "${MARKS[@]}" "${SETS[@]}" "${RUN[@]}" < /dev/null > "$OUT/train-$fam.log" 2>&1
  echo "train $fam exit $?"; tail -2 "$OUT/train-$fam.log"
  if [ -d "$WORK/$fam/final" ] && [ "${SKIP_EVAL:-0}" != 1 ]; then
    timeout "${EVAL_LIMIT:-75}" $PY -m maskplay eval blimp "$WORK/$fam/final" --data "$BLIMP_DATA" --device "$DEVICE" \
      --batch-size "${EVAL_BATCH:-2048}" ${BLIMP_LIMIT:+--limit "$BLIMP_LIMIT"} --out "$OUT/blimp-$fam.json" < /dev/null > "$OUT/blimp-$fam.log" 2>&1
    echo "blimp $fam exit $?"; grep -i "macro" "$OUT/blimp-$fam.log" | tail -1
    for method in ${BLIMP_METHODS:-}; do  # the same model scored another way too (GPT-BERT: pll, BabyLM's mntp)
      timeout "${EVAL_LIMIT:-75}" $PY -m maskplay eval blimp "$WORK/$fam/final" --data "$BLIMP_DATA" --device "$DEVICE" \
        --method "$method" --batch-size "${EVAL_BATCH:-2048}" ${BLIMP_LIMIT:+--limit "$BLIMP_LIMIT"} \
        --out "$OUT/blimp-$fam-$method.json" < /dev/null > "$OUT/blimp-$fam-$method.log" 2>&1
      echo "blimp $fam --method $method exit $?"; grep -i "macro" "$OUT/blimp-$fam-$method.log" | tail -1
    done
    if [ "${BLIMP_RAW:-1}" = 1 ] && [ -d "$WORK/$fam/final-raw" ]; then  # the trained weights, not their average
      timeout "${EVAL_LIMIT:-75}" $PY -m maskplay eval blimp "$WORK/$fam/final-raw" --data "$BLIMP_DATA" --device "$DEVICE" \
        --batch-size "${EVAL_BATCH:-2048}" ${BLIMP_LIMIT:+--limit "$BLIMP_LIMIT"} --out "$OUT/blimp-raw-$fam.json" < /dev/null > "$OUT/blimp-raw-$fam.log" 2>&1
      echo "blimp $fam final-raw exit $?"; grep -i "macro" "$OUT/blimp-raw-$fam.log" | tail -1
    fi
  fi
done < "$OUT/plan.txt"

# 5. one JSON of everything
# shellcheck disable=SC2086
$PY benchmarks/babylm_plan.py summarize --out-dir "$OUT" --work "$WORK" --families $FAMILIES
