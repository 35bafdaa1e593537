"""The model's outputs on a set of rows and the task's metrics on them: accuracy and MCC (classification), Pearson and
Spearman (regression)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ...runtime.progress import track
from .batches import make_batch
from .model import FineTuned, HeadConfig


def metrics(head: HeadConfig, outputs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """accuracy + MCC (scikit-learn) for classification; Pearson + Spearman (scipy) for regression."""
    if head.objective == "classify":
        from sklearn.metrics import accuracy_score, matthews_corrcoef

        pred = outputs.argmax(-1)
        return {"accuracy": float(accuracy_score(labels, pred)), "mcc": float(matthews_corrcoef(labels, pred))}
    from scipy.stats import pearsonr, spearmanr

    if len(labels) < 2 or np.ptp(outputs) == 0 or np.ptp(labels) == 0:
        return {"pearson": 0.0, "spearman": 0.0}
    return {"pearson": float(pearsonr(outputs, labels)[0]), "spearman": float(spearmanr(outputs, labels)[0])}


@torch.inference_mode()
def predict_rows(model: FineTuned, rows: list[list[int]], batch_size: int = 64, progress: bool = False) -> np.ndarray:
    """Logits (N, labels) or scores (N,), float32, in the order of rows (batched by length); progress: a bar on a
    terminal, plain periodic lines otherwise (maskplay.runtime.progress)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    order = sorted(range(len(rows)), key=lambda k: -len(rows[k]))
    out: list[Tensor | None] = [None] * len(rows)
    for start in track(range(0, len(order), batch_size), desc="predict", unit="batch", enabled=progress):
        chunk = order[start:start + batch_size]
        result = model(**make_batch([rows[k] for k in chunk], model.config, model.head_config.pair, device)).float().cpu()
        for k, value in zip(chunk, result, strict=True):
            out[k] = value
    model.train(was_training)
    return torch.stack(out).numpy() if out else np.zeros((0,), dtype=np.float32)  # type: ignore[arg-type]


def default_metric(head: HeadConfig) -> str:
    return "mcc" if head.objective == "classify" else "pearson"
