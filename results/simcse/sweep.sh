#!/usr/bin/env bash
# Learning-rate sweep for unsupervised SimCSE on the 40-minute mini BERT: 3 minutes each, 1 thread, bf16,
# chosen on STS-B dev Spearman (as the paper selects on STS-B dev; SICK is not looked at).
set -euo pipefail
export OMP_NUM_THREADS=1
M=.venv/bin/maskplay
for lr in 3e-5 1e-4 3e-4; do
  $M simcse runs/cmp2/bert/final --out runs/simcse/sweep-bert-$lr --lr $lr --minutes 3 --threads 1 \
     --precision bf16 --seed 0 --overwrite
  $M eval sts runs/simcse/sweep-bert-$lr --precision fp32 --out results/simcse/sweep-bert-$lr-sts.json
done
