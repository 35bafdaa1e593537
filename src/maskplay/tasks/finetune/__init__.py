"""Fine-tuning a maskplay backbone on a sentence (or sentence-pair) task: classification or regression.

The backbone is any encoder family, read as the paper or the family's users read it downstream:
- T-TA with the diagonal mask dropped (diagonal_mask=False), as the T-TA paper does downstream;
- BERT, ELECTRA (the discriminator) and UniLM (as BERT: bidirectional mask, segments for pairs);
- GPT from the last real token (the only one that has read the whole input).
Pooling: "first" ([CLS]/[SOS]), "mean" (the real tokens, [SOS]/[EOS] excluded) or "last" (the last real token).
The head reads the pooled last hidden state: "linear" = Dropout + Linear; "bert" = HuggingFace's
BertForSequenceClassification (pooler Dense + tanh, Dropout, Linear); "electra" = HuggingFace's
ElectraClassificationHead (Dropout, Dense, GELU, Dropout, Linear). The LM head of the backbone is dropped.

A pair is one input, `[SOS] text [SEP] pair [EOS]` (BERT's `[CLS] a [SEP] b [SEP]` with a BERT vocabulary),
segment 1 after the first separator where the backbone has segment embeddings.

A fine-tuned model directory: config.json (the backbone's ModelConfig), head_config.json (HeadConfig),
model.safetensors (backbone.* + classifier.*, loaded strictly), manifest.json (its sha256), tokenizer.json.

The package, one module per job: model.py (HeadConfig, the heads, FineTuned and its checkpoint files), data.py (input
files -> Examples, labels), batches.py (Examples -> model inputs), evaluation.py (predictions, metrics), loop.py
(finetune: the training loop), directory.py (load_backbone, load_finetuned). Every name is importable from here."""

from .batches import encode_examples, make_batch
from .data import Example, class_names, is_number, label_values, read_examples
from .directory import load_backbone, load_finetuned
from .evaluation import default_metric, metrics, predict_rows
from .loop import FinetuneOptions, FinetuneResult, finetune
from .model import DEFAULT_POOLING, DENSE_HEADS, HEADS, METRICS, POOLINGS, TASKS, ClassifierHead, FineTuned, HeadConfig

__all__ = ["DEFAULT_POOLING", "DENSE_HEADS", "HEADS", "METRICS", "POOLINGS", "TASKS", "ClassifierHead", "Example",
           "FineTuned", "FinetuneOptions", "FinetuneResult", "HeadConfig", "class_names", "default_metric",
           "encode_examples", "finetune", "is_number", "label_values", "load_backbone", "load_finetuned",
           "make_batch", "metrics", "predict_rows", "read_examples"]
