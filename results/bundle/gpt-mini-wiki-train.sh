#!/bin/bash
# GPT at BERT's budget: the section-4 settings, stopped after BERT's 6,389 steps (the machine is shared, so the
# 40 wall-clock minutes of section 4 would not be the same compute); code: commit fcba801 (runs/frozen-fcba801).
cd "$(git rev-parse --show-toplevel)"
export PYTHONPATH=runs/frozen-fcba801/src OMP_NUM_THREADS=1
.venv/bin/python -m maskplay pretrain --config configs/mini-gpt.toml --data runs/data-wiki16k --out runs/cmp2/gpt \
    --batch-size 64 --lr 5e-4 --precision bf16 --max-minutes 300 --max-steps 100000 \
    --set optim.warmup_steps=100 --set run.eval_every=100 --set run.eval_batches=20 --set run.threads=1 \
    --set run.save_every=6389 --set run.keep_last=3 --set run.log_every=10 --set run.progress=false &
pid=$!
until grep -q "saved checkpoint runs/cmp2/gpt/ckpt-006389" runs/cmp2/gpt/train.log 2>/dev/null; do
  sleep 2; kill -0 $pid 2>/dev/null || exit 1
done
kill -TERM $pid; wait $pid
.venv/bin/python - <<'PY'
# RUN_DIR/final from the step-6389 checkpoint, as the trainer's export_final writes it
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
print("wrote", run / "final")
PY
