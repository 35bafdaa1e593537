#!/usr/bin/env bash
# docs/results/time-to-quality.md: every evaluation of the two-hour models, after
# benchmarks/time_to_quality.py has left runs/ttq-2h/NAME/run/final. Run from the repository root:
#   scripts/eval_two_hour.sh CORE NAME...     the models one after the other on core CORE (log runs/eval-NAME.log)
# e.g. scripts/eval_two_hour.sh 0 two-hour-gpt two-hour-gpt-bert
# FREQ=DIR takes SIF's piece frequencies from a prepared corpus other than runs/data-wg16k (the model's own data:
# FREQ=runs/data-gut16k for the Gutenberg-only runs).
set -euo pipefail
M="python -m maskplay"
C=../shared/data/cola/raw
E=results/time-to-quality/eval
FREQ=${FREQ:-runs/data-wg16k}
mkdir -p "$E"
one() {
  local name=$1 core=$2 m=runs/ttq-2h/$1/run/final
  export OMP_NUM_THREADS=1
  local run="taskset -c $core"
  $run $M eval blimp "$m" --out "$E/$name-blimp.json"                              # all 1,000 pairs x 36
  if [ "$name" = two-hour-gpt-bert ]; then                                        # its other two readings
    $run $M eval blimp "$m" --method pll --limit 300 --out "$E/$name-blimp-pll-300.json"
    $run $M eval blimp "$m" --method fused --limit 300 --out "$E/$name-blimp-fused-300.json"
  fi
  $run $M eval sts "$m" --datasets stsb --pooling mean --out "$E/$name-sts-mean.json"
  $run $M eval sts "$m" --datasets stsb --pooling sif --frequencies "$FREQ" --out "$E/$name-sts-sif.json"
  $run $M eval sts "$m" --pooling sif --static --remove-components 1 --frequencies "$FREQ" \
    --out "$E/$name-sts-sif-static.json"             # STS-B and SICK (as tta-two-hour's card cites): the table alone
  $run $M eval spelling "$m" --out "$E/$name-spelling.json"
  $run $M eval cola "$m" --train-limit 2000 --out "$E/$name-cola-zeroshot.json"
  $run $M finetune "$m" --task classify --train $C/in_domain_train.tsv --dev $C/in_domain_dev.tsv \
    --out "runs/ft-2h/cola-$name" --epochs 3 --batch-size 32 --lr 1e-4 --eval-every 100 --threads 1 \
    --results "$E/$name-cola-finetuned.json"
  $run $M eval nbest "$m" --limit 200 --out "$E/$name-nbest.json"                # LibriSpeech reranking
}
core=$1
shift
for name in "$@"; do
  one "$name" "$core" > "runs/eval-$name.log" 2>&1
done
