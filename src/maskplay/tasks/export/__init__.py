"""maskplay models out to HuggingFace (`maskplay export --to-hf`, `--to-sentence-transformers`; docs/guides/huggingface.md):
the twin architecture where one can express the model, else HuggingFace custom code (hf_code/, a standalone copy
of the backbone that imports torch and transformers only: it is package data, never imported by maskplay)."""

from .hf import export_sentence_transformers, twin_or_custom
from .revisions import export_revisions
from .to_hf import export_to_hf
from .tokenizer_files import special_ids, tokenizer_files

__all__ = ["export_revisions", "export_sentence_transformers", "export_to_hf", "special_ids", "tokenizer_files",
           "twin_or_custom"]
