#!/bin/bash
# Export one training checkpoint as a model directory and evaluate it like a bundled model (fp32, one thread):
#   scripts/eval_checkpoint.sh RUN_DIR STEP DATA_DIR RESULTS_PREFIX
#   scripts/eval_checkpoint.sh runs/bundle2/tta-rotary 3560 runs/data-wiki16k results/bundle/candidate-tta-rotary-step3560
# writes RUN_DIR-stepSTEP/ (the model) and RESULTS_PREFIX-{heldout,sts,sts-sif,spelling,cola,nbest}.json
set -euo pipefail
RUN=$1; STEP=$2; DATA=$3; R=$4
export OMP_NUM_THREADS=1
D=$RUN-step$STEP
CKPT=$(printf "%s/ckpt-%06d" "$RUN" "$STEP")
[ -d "$CKPT" ] || { echo "eval_checkpoint.sh: no checkpoint $CKPT" >&2; exit 2; }
python - "$CKPT" "$D" "$DATA" <<'PY'
import json, sys
from pathlib import Path
from maskplay.config import ModelConfig, from_dict
from maskplay.families import build_model
from maskplay.data.tokenizer import load_tokenizer
ckpt, out, data = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
model = build_model(from_dict(ModelConfig, json.loads((ckpt / "model_config.json").read_text())))
model.load_weights(ckpt / "model.safetensors")
model.save_pretrained(out)
load_tokenizer(data).save(out)
PY
python scripts/heldout_loss.py "$D" --split "$DATA/valid" --out "$R-heldout.json"
maskplay eval sts "$D" --precision fp32 --out "$R-sts.json"
maskplay eval sts "$D" --pooling sif --static --remove-components 1 --frequencies "$DATA" --precision fp32 --out "$R-sts-sif.json"
maskplay eval spelling "$D" --precision fp32 --out "$R-spelling.json"
maskplay eval cola "$D" --precision fp32 --out "$R-cola.json"
maskplay eval nbest "$D" --limit 200 --precision fp32 --out "$R-nbest.json"
