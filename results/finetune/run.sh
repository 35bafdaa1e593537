#!/bin/bash
# docs/results/families-on-tasks.md: every family fine-tuned on CoLA and STS-B with one budget, next to its zero-shot
# numbers.
# Run from the repository root. What ran: the code of commit fcba801, frozen in runs/frozen-fcba801 (other work was
# changing the checkout meanwhile):  mkdir -p runs/frozen-fcba801 && git archive fcba801 src | tar -x -C runs/frozen-fcba801
# and PYTHONPATH=runs/frozen-fcba801/src; without it, the installed maskplay runs.
set -e
export OMP_NUM_THREADS=1
[ -d runs/frozen-fcba801/src ] && export PYTHONPATH=runs/frozen-fcba801/src
M=".venv/bin/python -m maskplay"
C=../shared/data/cola/raw S=../shared/data/stsbenchmark

# 1. The GPT: section 4's BERT run as GPT (batch 64, lr 5e-4, 100 warmup steps of a 100,000-step schedule, bf16,
#    one thread), stopped after BERT's 6,389 steps: a checkpoint is saved at exactly that step (save_every=6389),
#    the run is then stopped with SIGTERM, and RUN_DIR/final is written from that checkpoint.
$M pretrain --config configs/mini-gpt.toml --data runs/data-wiki16k --out runs/cmp2/gpt \
    --batch-size 64 --lr 5e-4 --precision bf16 --max-minutes 300 --max-steps 100000 \
    --set optim.warmup_steps=100 --set run.eval_every=100 --set run.eval_batches=20 --set run.threads=1 \
    --set run.save_every=6389 --set run.keep_last=3 --set run.log_every=10 --set run.progress=false &
pid=$!
until grep -q "saved checkpoint runs/cmp2/gpt/ckpt-006389" runs/cmp2/gpt/train.log 2>/dev/null; do sleep 2; done
kill -TERM $pid; wait $pid || true
.venv/bin/python - <<'PY'
import json, shutil
from pathlib import Path
from maskplay.config import ModelConfig, from_dict
from maskplay.modeling import family_class
from maskplay.tokenizer import load_tokenizer
run = Path("runs/cmp2/gpt"); ckpt = run / "ckpt-006389"
config = from_dict(ModelConfig, json.loads((ckpt / "model_config.json").read_text()))
model = family_class(config.family)(config)
model.load_weights(ckpt / "model.safetensors")
model.save_pretrained(run / "final")
load_tokenizer(run / "tokenizer.json").save(run / "final")
shutil.copy(ckpt / "config.json", run / "final" / "train_config.json")
PY

# 2. Fine-tuning: the same options for every family (fp32: finetune has no --precision), one thread.
for m in tta-mini-wiki:tta runs/cmp2/bert/final:bert runs/cmp2/electra/final:electra unilm-titles-mini:unilm \
         runs/cmp2/gpt/final:gpt; do
  model=${m%%:*} name=${m##*:}
  $M finetune $model --task classify --train $C/in_domain_train.tsv --dev $C/in_domain_dev.tsv \
    --out runs/ft2/cola-$name --epochs 3 --batch-size 32 --lr 1e-4 --eval-every 100 --threads 1 \
    --results results/finetune/cola-$name.json
  $M finetune $model --task regress --train $S/sts-train.csv --dev $S/sts-dev.csv \
    --out runs/ft2/stsb-$name --epochs 3 --batch-size 32 --lr 1e-4 --eval-every 100 --threads 1 \
    --results results/finetune/stsb-$name.json
  # 3. Zero-shot, the same models: cosine of mean-pooled embeddings (STS-B dev, SICK) and the unsupervised CoLA score
  $M eval sts $model --precision fp32 --out results/finetune/zeroshot-$name-sts.json
  $M eval cola $model --precision fp32 --out results/finetune/zeroshot-$name-cola.json
done
# 4. One learning-rate probe: BERT on STS-B at lr 5e-4
$M finetune runs/cmp2/bert/final --task regress --train $S/sts-train.csv --dev $S/sts-dev.csv \
  --out runs/ft2/stsb-bert-lr5e-4 --epochs 3 --batch-size 32 --lr 5e-4 --eval-every 100 --threads 1 \
  --results results/finetune/stsb-bert-lr5e-4.json
python results/finetune/summarize.py
