"""Where a fine-tuning run starts from and what `maskplay predict` loads: model directories (pretrained, bundled or
fine-tuned) with their tokenizers."""

from __future__ import annotations

from pathlib import Path

from ...data.tokenizer import Tokenizer, check_covers, load_tokenizer
from ...families import MaskplayModel
from ...runtime.files import model_file
from ...runtime.model_dir import HEAD_CONFIG_NAME, resolve_model_dir
from .model import FineTuned


def load_backbone(directory: str | Path) -> tuple[MaskplayModel, Tokenizer]:
    """The model to fine-tune: a pretrained model directory (or bundled name); or a fine-tuned one, whose encoder
    is then fine-tuned again on the new task with a new head (its old head is dropped)."""
    resolved = resolve_model_dir(directory)
    if model_file(resolved, HEAD_CONFIG_NAME).is_file():
        model, tokenizer = load_finetuned(resolved)
        return model.backbone, tokenizer
    from ..score.scorer import load_model_dir

    return load_model_dir(directory)


def load_finetuned(directory: str | Path) -> tuple[FineTuned, Tokenizer]:
    directory = resolve_model_dir(directory)
    model = FineTuned.from_pretrained(directory)
    if not model_file(directory, "tokenizer.json").is_file():
        raise FileNotFoundError(f"{directory / 'tokenizer.json'} not found: a fine-tuned model directory needs it")
    tokenizer = load_tokenizer(directory / "tokenizer.json")
    check_covers(tokenizer, model.config.vocab_size, str(directory))
    return model, tokenizer
