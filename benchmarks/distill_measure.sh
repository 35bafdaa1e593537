#!/usr/bin/env bash
# Distillation into T-TA (docs/results/distillation.md): a masked LM as teacher (TEACHER, default the bundled
# unilm-titles-mini), T-TA students of its shape at equal student compute (the same steps, batch 32, data and
# AdamW), the teacher's PLL against the students' one pass. Run from the repository root; W is a scratch directory
# (nothing of it goes in the repo), R the results folder. benchmarks/distill_teacher.sh makes a BERT teacher first.
#   benchmarks/distill_measure.sh [STEPS ...]      (default: 450 900 1800; SKIP: scratch-kl at 1800)
#   TEACHER=runs/d44b/teacher/final W=runs/d44b/distill R=results/distill-bert VARIANTS="warm-kl scratch-ce" \
#     benchmarks/distill_measure.sh 450 900
set -euo pipefail
W=${W:-runs/distill44}
D=${D:-../shared/data}
PY=${PY:-python}
TEACHER=${TEACHER:-unilm-titles-mini}
R=${R:-results/distill}
VARIANTS=${VARIANTS:-warm-kl scratch-ce scratch-kl}
SKIP=${SKIP:-scratch-kl-1800}  # variant-steps runs left out
SPEED_STUDENT=${SPEED_STUDENT:-scratch-ce-450}  # every student has the teacher's shape: one is timed
STEPS=("${@:-450 900 1800}")
run() { OMP_NUM_THREADS=1 nice "$PY" "$@"; }
mkdir -p "$W" "$R"

# the data: two WikiExtractor files, one sentence a sequence, the teacher's tokenizer (15,701 train sequences)
run -m maskplay prepare --corpus "$D"/enwiki-wikiextractor/wiki_0{0,1}.gz --tokenizer "$TEACHER" \
    --out "$W/data" --mode sentences --max-length 128 --valid-fraction 0.02 --quiet
# the teacher's targets, once (top 64, the teacher in bf16: this CPU has AVX-512 BF16)
run -m maskplay distill prepare "$TEACHER" --data "$W/data" --out "$W/targets" --top-k 64 \
    --teacher-precision bf16 --threads 1

# the students: 450 steps of 32 = 15 minutes of one core at the mini T-TA step time of docs/results/benchmarks.md
# (2.0 s,
# fp32); 900 = 30 minutes. lr 1e-3, 45-step warmup (90 for 900), linear decay to 0, bf16 (precision auto)
for n in ${STEPS[@]}; do
  for v in $VARIANTS; do
    [[ " $SKIP " == *" $v-$n "* ]] && continue
    run benchmarks/distill_measure.py train "$v" --teacher "$TEACHER" --data "$W/data" \
        --targets "$W/targets" --out "$W/$v-$n" --steps "$n" --warmup $((n / 10))
  done
done

# teacher (PLL) and students (one pass), one process, one thread: BLiMP-dev 100 pairs x 36, agreement, Spearman
# and speed on 2,000 sentences of wiki_63 (never trained on by the students)
students=(--student tta-two-hour=tta-two-hour --student tta-two-hour-gutenberg=tta-two-hour-gutenberg)
for n in ${STEPS[@]}; do
  for v in $VARIANTS; do
    [ -d "$W/$v-$n/final" ] && students+=(--student "$v-$n=$W/$v-$n/final")
  done
done
run benchmarks/distill_measure.py eval --teacher "$TEACHER" "${students[@]}" --blimp "$D/blimp-dev" \
    --blimp-limit 100 --heldout-file "$D/enwiki-wikiextractor/wiki_63.gz" --heldout 2000 \
    --teacher-cache "$W/teacher-cache.json" --json "$R"/eval.json

# scoring speed alone: teacher PLL against a student's one pass (all students share one shape) and the bundled
# T-TA, 300 held-out sentences, interleaved, median of 5 rounds; precision auto (bf16 here), then fp32
for prec in auto fp32; do
  run benchmarks/distill_measure.py speed --teacher "$TEACHER" --student "student=$W/$SPEED_STUDENT/final" \
      --student tta-two-hour=tta-two-hour --precision $prec --json "$R/speed-$prec.json"
done

# N-best reranking (LibriSpeech dev 30-best, weights tuned on the other split): the teacher's PLL on 50
# utterances a split (its PLL is slow), every student on the same 50 and on 200 (tta-two-hour's 200: section 14)
run -m maskplay eval nbest "$TEACHER" --method pll --limit 50 --out "$R"/nbest-teacher-50.json
for n in ${STEPS[@]}; do
  for v in $VARIANTS; do
    for lim in 50 200; do
      [ -d "$W/$v-$n/final" ] && run -m maskplay eval nbest "$W/$v-$n/final" --limit $lim \
          --out "$R/nbest-$v-$n-$lim.json"
    done
  done
done
run -m maskplay eval nbest tta-two-hour --limit 50 --out "$R"/nbest-tta-two-hour-50.json
