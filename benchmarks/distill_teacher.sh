#!/usr/bin/env bash
# Distillation into T-TA with a teacher that ranks sentences (docs/results/distillation.md): the
# strongest masked LM this machine makes in under an hour of one core, BERT-MLM at 40 % masking (the 60-minute
# recipe of section 14, configs/ttq/hour-bert.toml) for 12,000 steps on the Wikipedia + Gutenberg mix, then
# distill_measure.sh's students of its shape. W is a scratch directory (nothing of it goes in the repository).
#   benchmarks/distill_teacher.sh          (about 45 minutes for the teacher on one free core of an AMD EPYC)
set -euo pipefail
W=${W:-runs/d44b}
D=${D:-../shared/data}
PY=${PY:-python}
run() { OMP_NUM_THREADS=1 nice "$PY" "$@"; }
[ -d "$W/tok-wg16k" ] || run -m maskplay tokenizer train --corpus "$D"/enwiki-wikiextractor "$D"/gutenberg-subset/*.txt.gz \
    --vocab-size 16384 --out "$W/tok-wg16k"
[ -d "$W/data-wg16k" ] || run -m maskplay prepare --corpus "$D"/enwiki-wikiextractor "$D"/gutenberg-subset/*.txt.gz \
    --tokenizer "$W/tok-wg16k" --out "$W/data-wg16k" --mode sentences --max-length 128 --quiet
run -m maskplay pretrain --config configs/ttq/hour-bert.toml --data "$W/data-wg16k" --set model.mask_probability=0.4 \
    --max-steps 12000 --out "$W/teacher" --set run.progress=false
mkdir -p results/distill-bert
run -m maskplay eval blimp "$W/teacher/final" --method pll --limit 300 --out results/distill-bert/teacher-blimp-pll-300.json
# the students and their measurement as docs/results/distillation.md's rows were made (commit 983a38d): 450, 900
# and 1,800 steps, warm-kl and scratch-ce also 3,600
TEACHER="$W/teacher/final" W="$W/distill" R=results/distill-bert SKIP="scratch-kl-1800 scratch-kl-3600" \
    SPEED_STUDENT=warm-kl-1800 PY="$PY" bash benchmarks/distill_measure.sh 450 900 1800 3600
