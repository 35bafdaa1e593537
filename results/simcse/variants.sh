#!/usr/bin/env bash
# Variants of the SimCSE recipe on the 40-minute mini BERT, 3 minutes each (compare with sweep-bert-3e-5: the same
# recipe at 3 minutes), and T-TA trained and evaluated without its diagonal mask. 1 thread, bf16, seed 0.
set -euo pipefail
export OMP_NUM_THREADS=1
M=.venv/bin/maskplay
B=runs/cmp2/bert/final
run() {  # name, model, eval options, simcse options...
  local name=$1 model=$2 evalopts=$3; shift 3
  $M simcse $model --out runs/simcse/variant-$name --minutes 3 --threads 1 --precision bf16 --seed 0 --overwrite "$@"
  $M eval sts runs/simcse/variant-$name $evalopts --precision fp32 --out results/simcse/variant-$name-sts.json
}
run bert-dropout0.2 $B "" --dropout 0.2
run bert-dropout0.3 $B "" --dropout 0.3
run bert-lr1e-5 $B "" --lr 1e-5
$M eval sts $B --pooling first --precision fp32 --out results/simcse/before-bert-first-sts.json
run bert-first $B "--pooling first" --pooling first
$M eval sts tta-mini-wiki --no-diagonal-mask --precision fp32 --out results/simcse/before-tta-nodiag-sts.json
run tta-nodiag tta-mini-wiki "--no-diagonal-mask" --no-diagonal-mask
# ELECTRA's loss stays high (its embeddings start nearly parallel): does a larger learning rate help it?
run electra-3e-5 runs/cmp2/electra/final "" --lr 3e-5
run electra-3e-4 runs/cmp2/electra/final "" --lr 3e-4
# is bf16 training the cause? the 3-minute BERT recipe in fp32
run bert-fp32 $B "" --precision fp32
# the same 110 steps (as many as fp32 made in 3 minutes) in bf16, decaying over those steps
run bert-bf16-110steps $B "" --minutes 60 --max-steps 110
