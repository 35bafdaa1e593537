#!/usr/bin/env bash
# One strict-small recipe as far toward the 100 M-word budget as a deadline on one GPU allows
# (docs/results/babylm.md). Inside a deadline (DEADLINE seconds of this script, 540):
#   0. a short profile of the recipe's step (benchmarks/probes/gpu_profile_step.py: the disentangled bias's two kernels,
#      and FlexAttention);
#   0a. whether to train through FlexAttention: where the profile timed it faster and its GPU test passes;
#   0b. what each of the recipe's pieces costs its step (benchmarks/probes/switch_cost.py: one piece out at a time);
#   1. the recipe's step timed at its real batch (benchmarks/probes/compile_time.py), eager and compiled whole with each
#      block a region compiled once (COMPILE_SCOPES: "eager nested"; "step" unrolls every layer, "layers" compiles
#      block by block): the one that trains the most steps, its compile counted, is
#      the scope the run trains in (benchmarks/probes/pick_scope.py);
#   2. benchmarks/gpu_babylm.sh for that one family (prepare, plan, train, BLiMP-dev), its words budget planned from
#      the step time of 1. and the seconds the deadline leaves (at most the 100 M words of the rule), run.max_minutes
#      and the training command's timeout set so that the final model is exported and scored before the deadline
#      (GPT-BERT causally and by MNTP's PLL, BabyLM's mntp backend);
#   3. with what is left: the GPU tests of the recipes' step (loss and gradients equal the CPU's), then GPT at GPT-2
#      small's shape against HuggingFace (benchmarks/gpu_train_speed.py), each under a timeout that ends by the deadline.
# Results in one archive, $OUT/results.tgz (babylm.json, profile.json, compile.json, train-speed.json, gpt2-small.json,
# pytest-gpu.log, the logs and the run's metrics; PACK=0 leaves them as files): one file to copy back from a remote
# machine. Do not tee the script's own output into $OUT (it is packed and emptied at the end).
#   OUT=DIR DATA_ROOT=../shared/data bash benchmarks/gpu_one_call.sh
#   bash benchmarks/gpu_stage.sh in      # first, for a remote GPU machine that receives a copy of the tree (DATA_ROOT=shared/data there)
# The full budget where a job's time limit is shorter than the run: two jobs on the same machine and WORK, the same
# run continued exactly, both with BABYLM_WORDS=100000000:
#   PART=1 PROFILE=0 BABYLM_WORDS=100000000 ... bash benchmarks/gpu_one_call.sh   # trains, checkpoints, stops
#   PART=2 PROFILE=0 BABYLM_WORDS=100000000 ... bash benchmarks/gpu_one_call.sh   # resumes, finishes, scores
# Knobs: OUT, WORK, FAMILY (gpt-bert), PART (1 or 2), PART_STEPS (the steps a part trains: default what fits),
# PROFILE (1), TRAIN (1; 0: steps 0-0b only), PROFILE_BIAS (the kernels profiled), FLEX (auto: 0a.), FLEX_TEST_LIMIT (150), SWITCHES (1: 0b.),
# SWITCH_LIMIT (60), SWITCH_ARGS, GPT2 (1: GPT-2 small's case with the time left), GPT2_BATCH (64; 32 measured 42.9 % MFU on an H200),
# DEADLINE, DEVICE (cuda), EVAL_LIMIT (45), PROFILE_LIMIT (100), COMPILE_LIMIT (150), COMPILE_SCOPES (eager nested), PACK (1),
# BLIMP_METHODS (more ways to score the final model: "pll" for GPT-BERT, empty for none), BLIMP_RAW (1: final-raw too,
# the trained weights, since final is their moving average), PROFILE_ARGS, COMPILE_ARGS,
# GPT2_ARGS (more arguments for gpu_profile_step.py, compile_time.py and gpu_train_speed.py: --tiny and small
# batches for a dry run), and gpu_babylm.sh's (BABYLM_WORDS caps the words).
set -u
OUT=${OUT:-gpu-one-call}
WORK=${WORK:-${TMPDIR:-/tmp}/gpu-babylm-work}
FAMILY=${FAMILY:-gpt-bert}
DEADLINE=${DEADLINE:-540}
DEVICE=${DEVICE:-cuda}
PY=${PYTHON:-python3}
EVAL_LIMIT=${EVAL_LIMIT:-45}
# GPT-BERT is scored causally (its default) and by MNTP's PLL (BabyLM's mntp backend) after training
BLIMP_METHODS=${BLIMP_METHODS-$([ "$FAMILY" = gpt-bert ] && echo pll)}
mkdir -p "$OUT" "$WORK"
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
left() { echo $((DEADLINE - SECONDS)); }

# results: one archive at the end (one file to copy back), $OUT/results.tgz
pack() {
  tar czf "$WORK/results.tgz" -C "$OUT" --exclude '.*.lock' . \
    && mv "$WORK/results.tgz" "$OUT/results.tgz" \
    && find "$OUT" -mindepth 1 ! -name results.tgz -delete
}
[ "${PACK:-1}" = 1 ] && trap pack EXIT

# 0. where the step's time goes on this GPU: kernels, idle, launches, host syncs, top operators; both kernels of
# the disentangled bias, and FlexAttention (benchmarks/probes/gpu_profile_step.py)
if [ "${PROFILE:-1}" = 1 ]; then
  # shellcheck disable=SC2086
  # FlexAttention trains on a CUDA device only: a CPU dry run profiles the two bias kernels
  PROFILE_BIAS=${PROFILE_BIAS:-$([ "$DEVICE" = cuda ] && echo "gather one-hot flex" || echo "gather one-hot")}
  timeout "${PROFILE_LIMIT:-100}" $PY benchmarks/probes/gpu_profile_step.py --device "$DEVICE" --families "$FAMILY" \
    --bias $PROFILE_BIAS --out "$OUT/profile.json" ${PROFILE_ARGS:-} > "$OUT/profile.log" 2>&1
  echo "profile exit $? at ${SECONDS}s"; grep -v "^ \{2\}aten\|^USDT" "$OUT/profile.log" | head -12
  cp "$OUT/profile.json" "$WORK/profile.json" 2>/dev/null  # for a later command on this machine (TRAIN=0's)
fi
PROFILE_JSON=$OUT/profile.json
[ -f "$PROFILE_JSON" ] || PROFILE_JSON=$WORK/profile.json

# 0a. whether to train through FlexAttention (run.flex_attention; FLEX: auto, 1, 0): with auto, where the profile
# timed the step through it at least 5 % faster than with the gathered bias and its GPU test (loss and every
# gradient against the CPU's) passes here first; SDPA with the gathered bias otherwise
FLEX=${FLEX:-auto}
# an earlier command's choice on this machine (PART=1's, or TRAIN=0's diagnostics) where this one profiles nothing
[ "$FLEX" = auto ] && { [ "${PART:-}" = 2 ] || [ "${PROFILE:-1}" = 0 ]; } && [ -f "$WORK/flex.txt" ] \
  && FLEX=$(cat "$WORK/flex.txt")
if [ "$FLEX" = auto ]; then
  FLEX=$($PY - "$PROFILE_JSON" <<'EOF'
import json, sys
from pathlib import Path
path = Path(sys.argv[1])
rows = {r["bias"]: r["step_ms"] for r in json.loads(path.read_text())["rows"]} if path.is_file() else {}
print(1 if "flex" in rows and "gather" in rows and rows["flex"] < 0.95 * rows["gather"] else 0)
EOF
)
  if [ "$FLEX" = 1 ]; then
    # flex only where its tests ran and passed (skipped, as off a GPU, is not passed): eager, and the step
    # compiled whole with the block mask made in its graph (the scope step 1 may pick)
    timeout "${FLEX_TEST_LIMIT:-150}" $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu.py \
      -k "flex and $FAMILY" > "$OUT/pytest-flex.log" 2>&1
    tail -1 "$OUT/pytest-flex.log" | grep -Eq "^[0-9]+ passed(, [0-9]+ warnings?)? in" || FLEX=0
    echo "flex GPU test: $(tail -1 "$OUT/pytest-flex.log")"
  fi
fi
echo "flex attention: $FLEX at ${SECONDS}s" | tee -a "$OUT/one-call.txt"
echo "$FLEX" > "$WORK/flex.txt"

# 0b. what each of the recipe's pieces costs its step: the step with one piece out at a time, and with all out
# (benchmarks/probes/switch_cost.py), so that a faster step is looked for where the time is
if [ "${SWITCHES:-1}" = 1 ]; then
  # shellcheck disable=SC2086
  timeout "${SWITCH_LIMIT:-60}" $PY benchmarks/probes/switch_cost.py --device "$DEVICE" --families "$FAMILY" \
    --out "$OUT/switch-cost.json" ${SWITCH_ARGS:-} > "$OUT/switch-cost.log" 2>&1
  echo "switch_cost exit $? at ${SECONDS}s"; grep -A20 "against the recipe" "$OUT/switch-cost.log"
fi

# TRAIN=0: the diagnostics alone (a first, short command; the next, with PROFILE=0 SWITCHES=0 on this machine while
# it is warm, trains with the flex choice made here)
if [ "${TRAIN:-1}" = 0 ]; then
  echo "diagnostics done at ${SECONDS}s (TRAIN=0)"
  exit 0
fi

# 1. the step eager and compiled whole (COMPILE_SCOPES, "eager nested": since commit 308e144 every recipe's step
# compiles into one graph, and since commit 9fc73c4 "nested" traces and lowers each block once for every layer, which on a CPU
# halved the compile of the whole step at the same steady step (docs/results/training-speed.md; "step",
# every layer unrolled, took 213-293 s there, about COMPILE_LIMIT at a GPU's likely speed); "layers" compiles block by
# block, which an H200 ran no faster on 2026-11-28, 111 against 110 ms), at the
# recipe's batch, through FlexAttention where 0a. chose it; inductor's caches stay on, so that the training run below
# may compile its graph from them (not yet measured: the plan counts the whole compile again). The JSON is written
# after each case: a compile that runs past COMPILE_LIMIT leaves eager's timing
FLEX_ARG=$([ "$FLEX" = 1 ] && echo --flex)
# shellcheck disable=SC2086
timeout "${COMPILE_LIMIT:-150}" $PY benchmarks/probes/compile_time.py --device "$DEVICE" --batch 256 --families "$FAMILY" \
  --scopes ${COMPILE_SCOPES:-eager nested} --steps 5 --warm-cache $FLEX_ARG --out "$OUT/compile.json" ${COMPILE_ARGS:-} \
  > "$OUT/compile.log" 2>&1
echo "compile_time exit $? at ${SECONDS}s"; cat "$OUT/compile.log"

# the scope to train in: the one that trains the most steps in the time left, a compiled one paying its compile
# (benchmarks/probes/pick_scope.py); eager when nothing else was timed. FIXED_S: what the run spends besides compiling,
# training and scoring (preparing 30 s, starting 25 s, the final export and held-out pass 30 s)
FIXED_S=85
read -r SCOPE COMPILE_S < <($PY benchmarks/probes/pick_scope.py "$OUT/compile.json" "$FAMILY" "$(( $(left) - FIXED_S ))" \
  --flex "$FLEX" --speed-out "$OUT/train-speed.json")
SCOPE=${SCOPE:-eager} COMPILE_S=${COMPILE_S:-0}
SET="${BABYLM_SET:-} run.flex_attention=$([ "$FLEX" = 1 ] && echo true || echo false)"
[ "$SCOPE" = layers ] && SET="$SET run.compile=true run.compile_scope=layers"
[ "$SCOPE" = step ] && SET="$SET run.compile=true run.compile_scope=step"
[ "$SCOPE" = nested ] && SET="$SET run.compile=true run.compile_scope=nested"
[ "$SCOPE" = eager ] && SET="$SET run.compile=false"

# 2. the budget: what is left after preparing (30 s), starting (25 s), the compile, the final export and held-out
# pass (30 s) and BLiMP (EVAL_LIMIT for each way of scoring); planned at a real step 1.1 x the timed one, stopped by run.max_minutes at 1.15 x
EVALS=$(( EVAL_LIMIT * (1 + $(wc -w <<< "$BLIMP_METHODS") + ${BLIMP_RAW:-1}) ))  # + final-raw, causally
[ "${PART:-}" = 1 ] && EVALS=0  # the first of two commands scores nothing
TRAIN_SECONDS=$(( ($(left) - FIXED_S - COMPILE_S - EVALS) * 100 / 115 ))
[ "$TRAIN_SECONDS" -lt 10 ] && TRAIN_SECONDS=10
MAX_MINUTES=$($PY -c "print(round(($TRAIN_SECONDS * 1.15 + $COMPILE_S) / 60, 3))")
TRAIN_LIMIT=$($PY -c "print(int($MAX_MINUTES * 60 + 55))")
PARTS=()
if [ -n "${PART:-}" ]; then
  # one run over two commands (PART=1, then PART=2 on the same machine): the schedule is BABYLM_WORDS' (set it), and
  # each command stops at the step its time allows (run.stop_at_step; run.max_minutes counts both commands' time)
  RESUMED=0
  [ "$PART" = 2 ] && [ -f "$WORK/$FAMILY/metrics.jsonl" ] && RESUMED=$($PY -c "import json, sys
print(max((json.loads(line).get('step', 0) for line in open(sys.argv[1]) if line.strip()), default=0))" \
    "$WORK/$FAMILY/metrics.jsonl")
  STEP_MS=$($PY -c "import json, sys; print(json.load(open(sys.argv[1]))['rows'][0]['step_ms'])" "$OUT/train-speed.json")
  STOP_AT_STEP=$($PY -c "print($RESUMED + ${PART_STEPS:-max(1, int($TRAIN_SECONDS * 1000 / ($STEP_MS * 1.1)))})")
  MAX_MINUTES=none
  PARTS=(STOP_AT_STEP="$STOP_AT_STEP" RESUME=$([ "$PART" = 2 ] && echo 1 || echo 0)
         SKIP_EVAL=$([ "$PART" = 1 ] && echo 1 || echo 0))
  echo "part $PART of 2: from step $RESUMED to at most $STOP_AT_STEP" | tee -a "$OUT/one-call.txt"
fi
echo "scope $SCOPE (compile ${COMPILE_S}s), training ${TRAIN_SECONDS}s planned, run.max_minutes=$MAX_MINUTES," \
  "timeout ${TRAIN_LIMIT}s, $(left)s left" | tee -a "$OUT/one-call.txt"
env "${PARTS[@]}" OUT="$OUT" WORK="$WORK" DEVICE="$DEVICE" PYTHON="$PY" BABYLM_FAMILIES="$FAMILY" SPEED_JSON="$OUT/train-speed.json" \
  TRAIN_SECONDS=$TRAIN_SECONDS PLAN_OVERHEAD=1.1 MAX_MINUTES=$MAX_MINUTES TRAIN_LIMIT=$TRAIN_LIMIT \
  EVAL_LIMIT=$EVAL_LIMIT BABYLM_SET="$SET" WHEELS=${WHEELS:-none} BLIMP_METHODS="$BLIMP_METHODS" BLIMP_RAW=${BLIMP_RAW:-1} \
  bash benchmarks/gpu_babylm.sh
echo "babylm done at ${SECONDS}s, $(left)s left"
cp "$WORK/$FAMILY/metrics.jsonl" "$OUT/metrics-$FAMILY.jsonl" 2>/dev/null  # the loss curve

# 3. with what is left
if [ "$(left)" -gt 40 ] && [ "$DEVICE" = cuda ]; then
  timeout $(( $(left) > 90 ? 60 : $(left) - 20 )) $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu.py -k "recipe or compiled" \
    > "$OUT/pytest-gpu.log" 2>&1
  echo "pytest exit $?"; tail -3 "$OUT/pytest-gpu.log"
fi
if [ "$(left)" -gt 60 ] && [ "${GPT2:-1}" = 1 ]; then
  # shellcheck disable=SC2086
  timeout $(( $(left) - 5 )) $PY benchmarks/gpu_train_speed.py --device "$DEVICE" --shapes gpt2-small --families gpt \
    --gpt2-batch "${GPT2_BATCH:-64}" --out "$OUT/gpt2-small.json" ${GPT2_ARGS:-} > "$OUT/gpt2-small.log" 2>&1
  echo "gpt2-small exit $?"; tail -6 "$OUT/gpt2-small.log"
fi
echo "done at ${SECONDS}s of $DEADLINE"
