#!/usr/bin/env bash
# Unsupervised SimCSE, equal budgets: 10 minutes of training each, 1 thread, bf16, batch 64, lr 3e-5 (the paper's;
# also the best of results/simcse/sweep.sh), mean pooling (what `eval sts` reads), the shared Wikipedia sentences.
# Before/after STS-B dev and SICK (eval sts in fp32), with the BoW / TF-IDF baselines in the same JSON files.
set -euo pipefail
export OMP_NUM_THREADS=1
M=.venv/bin/maskplay
for pair in tta-mini-wiki:tta runs/cmp2/bert/final:bert runs/cmp2/electra/final:electra; do
  model=${pair%%:*} name=${pair##*:}
  $M simcse $model --out runs/simcse/$name --minutes 10 --threads 1 --precision bf16 --seed 0 --save-every 200 --overwrite
  $M eval sts runs/simcse/$name --precision fp32 --out results/simcse/after-$name-sts.json
  for ckpt in runs/simcse/$name/ckpt-*; do   # the learning curve: STS-B dev only
    $M eval sts $ckpt --datasets stsb --precision fp32 --out results/simcse/curve-$name-$(basename $ckpt).json
  done
  cp runs/simcse/$name/simcse.json results/simcse/train-$name.json
done
