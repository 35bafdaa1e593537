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
model.safetensors (backbone.* + classifier.*, loaded strictly), manifest.json (its sha256), tokenizer.json."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import Tensor, nn

from .config import ModelConfig, from_dict
from .families import MaskplayModel, family_class
from .files import atomic_path, read_json_object
from .model_dir import (
    CONFIG_NAME,
    HEAD_CONFIG_NAME,
    WEIGHTS_NAME,
    check_sizes_fit,
    read_shapes,
    read_weights,
    resolve_model_dir,
    write_model_manifest,
)
from .progress import Progress, track
from .registry import family_names
from .tokenizer import Tokenizer, load_tokenizer

TASKS = ("classify", "regress", "pairs")
POOLINGS = ("first", "mean", "last")
HEADS = ("linear", "bert", "electra")
METRICS = ("accuracy", "mcc", "pearson", "spearman")
# XLNet: its content stream (every token sees every other) read at the last token, as HuggingFace's summary "last"
class _DefaultPoolings(Mapping[str, str]):
    """family -> the pooling its users read downstream (the family's `default_pooling`), looked up in the
    registry when asked, so a family registered later is here too."""

    def __getitem__(self, family: str) -> str:
        return family_class(family).default_pooling

    def __iter__(self) -> Iterator[str]:
        return iter(family_names())

    def __len__(self) -> int:
        return len(family_names())


DEFAULT_POOLING: Mapping[str, str] = _DefaultPoolings()


@dataclass
class HeadConfig:
    """What sits on the backbone. objective: "classify" (cross-entropy over labels) or "regress" (MSE, one
    output); pair: whether inputs are text pairs; labels: the class names in output order (classify)."""
    objective: str = "classify"
    labels: list[str] = field(default_factory=list)
    pair: bool = False
    pooling: str = "first"
    head: str = "linear"
    dropout: float = 0.1

    def __post_init__(self) -> None:
        if self.objective not in ("classify", "regress"):
            raise ValueError(f"head objective must be 'classify' or 'regress', got {self.objective!r}")
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {list(POOLINGS)}, got {self.pooling!r}")
        if self.head not in HEADS:
            raise ValueError(f"head must be one of {list(HEADS)}, got {self.head!r}")
        if self.objective == "classify" and len(self.labels) < 2:
            raise ValueError(f"classification needs at least 2 labels, got {self.labels}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @property
    def num_outputs(self) -> int:
        return len(self.labels) if self.objective == "classify" else 1


class ClassifierHead(nn.Module):
    def __init__(self, hidden: int, outputs: int, kind: str, dropout: float) -> None:
        super().__init__()
        self.kind = kind
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(hidden, hidden) if kind in DENSE_HEADS else None
        self.out = nn.Linear(hidden, outputs)

    def forward(self, pooled: Tensor) -> Tensor:
        return _HEAD_FORWARD[self.kind](self, pooled)


_HEAD_FORWARD = {
    "linear": lambda head, pooled: head.out(head.dropout(pooled)),
    # BertPooler, then BertForSequenceClassification's dropout + classifier
    "bert": lambda head, pooled: head.out(head.dropout(torch.tanh(head.dense(pooled)))),
    # ElectraClassificationHead
    "electra": lambda head, pooled: head.out(head.dropout(F.gelu(head.dense(head.dropout(pooled))))),
}
DENSE_HEADS = ("bert", "electra")  # the heads with a hidden x hidden dense layer before the output


class FineTuned(nn.Module):
    """A backbone (its LM head dropped) + a classification/regression head. The backbone given is used in place
    (its head replaced; fine-tuning trains its weights), except an ELECTRA with a generator, whose discriminator is
    copied out."""

    def __init__(self, backbone: MaskplayModel, head_config: HeadConfig) -> None:
        super().__init__()
        backbone = backbone.for_finetuning()  # the family's downstream tower, its LM / replaced-token head removed
        self.backbone = backbone
        self.head_config = head_config
        self.classifier = ClassifierHead(backbone.config.hidden_size, head_config.num_outputs, head_config.head,
                                         head_config.dropout)
        self.classifier.apply(backbone._init_weights)

    @property
    def config(self) -> ModelConfig:
        return self.backbone.config

    def features(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                 token_type_ids: Tensor | None = None) -> Tensor:
        """The backbone's last hidden state (B, L, H), read the family's downstream way."""
        kwargs = self.backbone.downstream_kwargs(input_ids, token_type_ids)
        return self.backbone(input_ids, attention_mask=attention_mask, **kwargs).last_hidden_state

    def pool(self, hidden: Tensor, attention_mask: Tensor) -> Tensor:
        attention_mask = attention_mask.bool()
        lengths = attention_mask.sum(1)
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        pooling = self.head_config.pooling
        if pooling == "first":
            return hidden[:, 0]
        if pooling == "last":
            return hidden[rows, lengths - 1]
        inner = attention_mask.clone()
        inner[:, 0] = False
        inner[rows, lengths - 1] = False
        inner = torch.where((inner.sum(1) > 0)[:, None], inner, attention_mask)  # [SOS] [EOS] alone: both
        return (hidden * inner[..., None]).sum(1) / inner.sum(1, keepdim=True)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> Tensor:
        """Logits (B, labels) for classification, scores (B,) for regression."""
        if attention_mask is None:
            attention_mask = input_ids != self.config.pad_token_id
        hidden = self.features(input_ids, attention_mask, token_type_ids)
        out = self.classifier(self.pool(hidden, attention_mask))
        return out[:, 0] if self.head_config.objective == "regress" else out

    def loss(self, outputs: Tensor, labels: Tensor) -> Tensor:
        if self.head_config.objective == "regress":
            return F.mse_loss(outputs.float(), labels.float())
        return F.cross_entropy(outputs.float(), labels.long())

    # ---- checkpoints --------------------------------------------------------------------------------

    def save_pretrained(self, directory: str | Path, tokenizer: Tokenizer | None = None) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        with atomic_path(directory / WEIGHTS_NAME) as tmp:
            save_file(tensors, str(tmp), metadata={"format": "pt", "family": self.config.family, "finetuned": "1"})
        with atomic_path(directory / CONFIG_NAME) as tmp:
            tmp.write_text(json.dumps(self.config.to_dict(), indent=2) + "\n")
        with atomic_path(directory / HEAD_CONFIG_NAME) as tmp:
            tmp.write_text(json.dumps(dataclasses.asdict(self.head_config), indent=2) + "\n")
        write_model_manifest(directory)
        if tokenizer is not None:
            tokenizer.save(directory)

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> FineTuned:
        """Load a directory written by save_pretrained; every weight must match (strict)."""
        directory = resolve_model_dir(directory)
        paths = [directory / n for n in (CONFIG_NAME, HEAD_CONFIG_NAME, WEIGHTS_NAME)]
        for path in paths:
            if not path.is_file():
                hint = " (a model that is not fine-tuned has no head_config.json)" if path.name == HEAD_CONFIG_NAME else ""
                raise FileNotFoundError(f"{path} not found: is {directory} a fine-tuned model directory?{hint}")
        config = from_dict(ModelConfig, read_json_object(paths[0]), source=str(paths[0]))
        head = from_dict(HeadConfig, read_json_object(paths[1]), source=str(paths[1]))
        check_sizes_fit(config, read_shapes(paths[2]), str(paths[0]), str(paths[2]))  # before building anything
        model = cls(family_class(config.family)(config), head)
        state = read_weights(paths[2])
        own = model.state_dict()
        missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
        shapes = [f"{k}: {tuple(state[k].shape)} vs {tuple(own[k].shape)}"
                  for k in own if k in state and state[k].shape != own[k].shape]
        if missing or unexpected or shapes:
            raise ValueError(f"{paths[2]} does not match the fine-tuned {config.family} model of {paths[1].name}: "
                             f"missing {missing}, unexpected {unexpected}, wrong shapes {shapes}")
        model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()}, strict=True)
        return model.eval()


def load_backbone(directory: str | Path) -> tuple[MaskplayModel, Tokenizer]:
    """The model to fine-tune: a pretrained model directory (or bundled name); or a fine-tuned one, whose encoder
    is then fine-tuned again on the new task with a new head (its old head is dropped)."""
    resolved = resolve_model_dir(directory)
    if (resolved / HEAD_CONFIG_NAME).is_file():
        model, tokenizer = load_finetuned(resolved)
        return model.backbone, tokenizer
    from .score.scorer import load_model_dir

    return load_model_dir(directory)


def load_finetuned(directory: str | Path) -> tuple[FineTuned, Tokenizer]:
    directory = resolve_model_dir(directory)
    model = FineTuned.from_pretrained(directory)
    if not (directory / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{directory / 'tokenizer.json'} not found: a fine-tuned model directory needs it")
    return model, load_tokenizer(directory / "tokenizer.json")


# ---- input files --------------------------------------------------------------------------------------------


@dataclass
class Example:
    text: str
    pair: str | None
    label: str | None
    where: str  # file:line


def _is_float(value: str) -> bool:
    try:
        return math.isfinite(float(value))
    except ValueError:
        return False


def read_examples(path: str | Path, text_column: str | None = None, text_pair_column: str | None = None,
                  label_column: str | None = None, need_labels: bool = True, need_pairs: bool | None = None,
                  ) -> list[Example]:
    """Rows of a TSV/CSV file with a header naming its columns; or CoLA's headerless tsv (source, label,
    original mark, sentence); or STS-B's headerless tsv/csv (genre, file, year, id, score, sentence1, sentence2);
    or, without labels (need_labels=False), plain text with one text per line (a tab separating a pair).
    A malformed row is a ValueError naming file:line."""
    from .data.source import csv_field_limit, read_lines

    source, lines = read_lines(path)  # a file, a FIFO / <(...), gzip; strict UTF-8, no NUL; lines on \n only
    with csv_field_limit(max(map(len, lines), default=0)):
        return _read_rows(source, lines, text_column, text_pair_column, label_column, need_labels, need_pairs)


def _read_rows(path: str, lines: list[str], text_column: str | None, text_pair_column: str | None,
               label_column: str | None, need_labels: bool, need_pairs: bool | None) -> list[Example]:

    numbered = [(k + 1, line) for k, line in enumerate(lines) if line.strip()]
    if not numbered:
        raise ValueError(f"{path}: no rows")
    first = numbered[0][1]
    tab = "\t" in first
    cells = first.split("\t") if tab else _csv_fields(first, f"{path}:{numbered[0][0]}")
    names = [c.strip() for c in cells]
    explicit = any(c is not None for c in (text_column, text_pair_column, label_column))
    header_guess = _header_columns(names, text_column, text_pair_column, label_column)
    examples: list[Example] = []
    if header_guess is not None:
        ti, pi, li = header_guess
        if need_pairs and pi is None:
            raise ValueError(f"{path}:{numbered[0][0]}: a pair task needs a second text column "
                             f"(--text-pair-column); the header has {names}")
        if need_labels and li is None:
            raise ValueError(f"{path}:{numbered[0][0]}: no label column (--label-column); the header has {names}")
        rows = numbered[1:]
        for number, line in rows:
            where = f"{path}:{number}"
            fields = line.split("\t") if tab else _csv_fields(line, where)
            if len(fields) < len(names):
                raise ValueError(f"{where}: {len(fields)} fields, the header has {len(names)} ({names})")
            examples.append(_example(fields[ti], fields[pi] if pi is not None else None,
                                     fields[li] if li is not None else None, where))
    elif explicit:
        raise ValueError(f"{path}:{numbered[0][0]}: the first line is not a header naming the columns given "
                         f"({', '.join(c for c in (text_column, text_pair_column, label_column) if c)}); it has {names}")
    elif tab and len(cells) == 4 and cells[1].strip() in ("0", "1") and cells[2].strip() in ("", "*", "?", "??", "#"):
        for number, line in numbered:  # CoLA: source, label, original mark, sentence
            fields = line.split("\t")
            where = f"{path}:{number}"
            if len(fields) != 4 or fields[1] not in ("0", "1"):
                raise ValueError(f"{where}: not a CoLA row (source, 0/1 label, mark, sentence): {line[:60]!r}")
            examples.append(_example(fields[3], None, fields[1], where))
    elif tab and len(cells) >= 7 and _is_float(cells[4]):
        for number, line in numbered:  # STS-B: genre, file, year, id, score, sentence1, sentence2[, sources]
            fields = line.split("\t")
            where = f"{path}:{number}"
            if len(fields) < 7 or not _is_float(fields[4]):
                raise ValueError(f"{where}: not an STS-B row (genre, file, year, id, score, sentence1, sentence2): "
                                 f"{line[:60]!r}")
            examples.append(_example(fields[5], fields[6], fields[4], where))
    elif not need_labels:
        for number, line in numbered:
            text, tab_found, pair = line.partition("\t")
            if need_pairs and not tab_found:
                raise ValueError(f"{path}:{number}: this model reads text pairs (two texts separated by a tab); "
                                 "the line has one text")
            examples.append(_example(text, pair if need_pairs else None, None, f"{path}:{number}"))
    else:
        raise ValueError(f"{path}:{numbered[0][0]}: unrecognised format: give a header line naming the columns "
                         "(text/sentence, label; --text-column, --label-column), or a CoLA or STS-B file")
    if not examples:
        raise ValueError(f"{path}: a header line and no rows: nothing to read")
    if need_pairs and examples[0].pair is None:
        raise ValueError(f"{path}: a pair task needs two texts per row, this file has one")
    return examples


def _csv_fields(line: str, where: str) -> list[str]:
    """One CSV line's fields; a line the csv module cannot parse (a lone \\r, ...) is an error naming it."""
    import csv

    try:
        return next(csv.reader([line]), [])
    except csv.Error as err:
        raise ValueError(f"{where}: not a CSV row ({err})") from None


_TEXT_NAMES = ("text", "sentence", "sentence1", "text_a", "question", "premise")
_PAIR_NAMES = ("text_pair", "sentence2", "text_b", "hypothesis")
_LABEL_NAMES = ("label", "labels", "score", "similarity", "acceptability")


def _header_columns(names: list[str], text: str | None, pair: str | None,
                    label: str | None) -> tuple[int, int | None, int | None] | None:
    """Column indices when `names` is a header: the given names, else the usual ones."""
    lower = [n.lower() for n in names]

    def find(given: str | None, usual: tuple[str, ...]) -> int | None:
        if given is not None:
            if given not in names:
                return -1
            return names.index(given)
        return next((lower.index(u) for u in usual if u in lower), None)

    ti, pi, li = find(text, _TEXT_NAMES), find(pair, _PAIR_NAMES), find(label, _LABEL_NAMES)
    if ti is None or ti == -1 or pi == -1 or li == -1:
        return None
    return ti, pi, li


def _example(text: str, pair: str | None, label: str | None, where: str) -> Example:
    text = text.strip()
    if not text:
        raise ValueError(f"{where}: empty text")
    if pair is not None:
        pair = pair.strip()
        if not pair:
            raise ValueError(f"{where}: empty second text")
    return Example(text, pair, label.strip() if label is not None else None, where)


def label_values(examples: Sequence[Example], head: HeadConfig) -> Tensor:
    """The labels as class indices (classify) or floats (regress); an unknown or non-numeric one names file:line."""
    out = []
    for ex in examples:
        if ex.label is None or ex.label == "":
            raise ValueError(f"{ex.where}: no label")
        if head.objective == "regress":
            if not _is_float(ex.label):
                raise ValueError(f"{ex.where}: label {ex.label!r} is not a number (regression)")
            out.append(float(ex.label))
        else:
            if ex.label not in head.labels:
                raise ValueError(f"{ex.where}: label {ex.label!r} is not one of the training labels {head.labels}")
            out.append(head.labels.index(ex.label))
    return torch.tensor(out, dtype=torch.float32 if head.objective == "regress" else torch.long)


def class_names(examples: Sequence[Example]) -> list[str]:
    names = sorted({ex.label for ex in examples if ex.label is not None})
    if all(_is_float(n) for n in names):
        names.sort(key=float)
    return names


# ---- batches ------------------------------------------------------------------------------------------------


def encode_examples(examples: Sequence[Example], tokenizer: Tokenizer, config: ModelConfig,
                    pair: bool) -> list[list[int]]:
    """[SOS] text [EOS], or [SOS] text [SEP] pair [EOS]; over-long inputs are cut (the longer text first)."""
    sp = tokenizer.special
    limit = config.max_position
    texts = tokenizer.backend.encode_batch([ex.text for ex in examples], add_special_tokens=False)
    pairs = tokenizer.backend.encode_batch([ex.pair or "" for ex in examples], add_special_tokens=False) if pair else None
    rows = []
    for k in range(len(examples)):
        a = texts[k].ids
        if pairs is None:
            rows.append([sp.sos, *a[:limit - 2], sp.eos])
            continue
        b = pairs[k].ids
        while len(a) + len(b) > limit - 3:
            if len(a) >= len(b):
                a = a[:-1]
            else:
                b = b[:-1]
        rows.append([sp.sos, *a, sp.sep, *b, sp.eos])
    return rows


def make_batch(rows: list[list[int]], config: ModelConfig, pair: bool,
               device: torch.device | str = "cpu") -> dict[str, Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), config.pad_token_id, dtype=torch.long)
    for k, r in enumerate(rows):
        ids[k, :len(r)] = torch.tensor(r)
    lengths = torch.tensor([len(r) for r in rows])
    mask = torch.arange(width)[None, :] < lengths[:, None]
    batch = {"input_ids": ids.to(device), "attention_mask": mask.to(device)}
    if pair and family_class(config.family).pair_segments and config.type_vocab_size >= 2:
        sep = (ids == config.separator_id).long()
        batch["token_type_ids"] = (((sep.cumsum(1) - sep) > 0) & mask).long().to(device)
    return batch


# ---- metrics ------------------------------------------------------------------------------------------------


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
    terminal, plain periodic lines otherwise (maskplay.progress)."""
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


# ---- training -----------------------------------------------------------------------------------------------


@dataclass
class FinetuneOptions:
    lr: float = 5e-5
    batch_size: int = 32
    epochs: int = 3
    max_steps: int | None = None  # overrides epochs for the schedule's length
    warmup: float = 0.1  # fraction of the steps
    weight_decay: float = 0.01
    patience: int | None = None  # evaluations without improvement before stopping; None = run all
    eval_every: int | None = None  # steps between dev evaluations; None = once per epoch
    max_minutes: float | None = None
    clip: float = 1.0
    seed: int = 0
    metric: str | None = None  # default: mcc (classify), pearson (regress)
    progress: bool = True  # a bar when stderr is a terminal, else a plain line every 30 s (maskplay.progress)

    def __post_init__(self) -> None:
        """Every bad option as one ValueError naming it (the command-line names; the CLI refuses them earlier)."""
        import math

        for name, value, least in (("--batch-size", self.batch_size, 1), ("--epochs", self.epochs, 1),
                                   ("--max-steps", self.max_steps, 1), ("--patience", self.patience, 1),
                                   ("--eval-every", self.eval_every, 1), ("--seed", self.seed, 0)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        for name, value, low, high in (("--lr", self.lr, 0, math.inf), ("--warmup", self.warmup, 0, 1),
                                       ("--weight-decay", self.weight_decay, 0, math.inf),
                                       ("--max-minutes", self.max_minutes, 0, math.inf), ("clip", self.clip, 0, math.inf)):
            if value is not None and not (math.isfinite(value) and low <= value < high and (name != "--lr" or value > 0)):
                raise ValueError(f"{name} must be a finite number in [{low}, {high}), got {value!r}")


@dataclass
class FinetuneResult:
    model: FineTuned
    best: dict[str, Any]
    history: list[dict[str, Any]]
    steps: int
    seconds: float


def default_metric(head: HeadConfig) -> str:
    return "mcc" if head.objective == "classify" else "pearson"


def finetune(backbone: MaskplayModel, tokenizer: Tokenizer, head: HeadConfig, train: Sequence[Example],
             dev: Sequence[Example], options: FinetuneOptions | None = None, log: Any = None) -> FinetuneResult:
    """AdamW + linear warmup/decay (maskplay.train.schedule); the dev metric after every epoch (or eval_every
    steps); the weights of the best dev evaluation are the ones returned."""
    from .train.config import OptimSection
    from .train.schedule import build_optimizer, learning_rate

    options = options or FinetuneOptions()
    metric = options.metric or default_metric(head)
    allowed = ("accuracy", "mcc") if head.objective == "classify" else ("pearson", "spearman")
    if metric not in allowed:
        raise ValueError(f"metric {metric!r} does not apply to {head.objective}; choose one of {list(allowed)}")
    if not train or not dev:
        raise ValueError("fine-tuning needs training and dev examples")
    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    torch.manual_seed(options.seed)
    model = FineTuned(backbone, head)
    device = next(model.parameters()).device
    train_rows = encode_examples(train, tokenizer, model.config, head.pair)
    train_labels = label_values(train, head)
    per_epoch = math.ceil(len(train_rows) / options.batch_size)
    total = options.max_steps if options.max_steps is not None else per_epoch * options.epochs
    if total < 1:
        raise ValueError("nothing to train: max_steps/epochs give 0 steps")
    optim = OptimSection(lr=options.lr, weight_decay=options.weight_decay, max_steps=total,
                         warmup_steps=int(options.warmup * total))
    optimizer = build_optimizer(model, optim)
    generator = torch.Generator().manual_seed(options.seed)
    eval_every = options.eval_every or per_epoch
    bar = Progress(total=total, desc="finetune", unit="step", leave=False, enabled=options.progress)
    judge = _DevJudge(model, head, encode_examples(dev, tokenizer, model.config, head.pair), label_values(dev, head),
                      metric, per_epoch, total, bar.write if bar.mode == "bar" else log)
    step, start, running, stop = 0, time.monotonic(), [], False
    model.train()
    while step < total and not stop:
        order = torch.randperm(len(train_rows), generator=generator).tolist()
        for s in range(0, len(order), options.batch_size):
            idx = order[s:s + options.batch_size]
            batch = make_batch([train_rows[k] for k in idx], model.config, head.pair, device)
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, optim)
            loss = model.loss(model(**batch), train_labels[idx].to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if options.clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), options.clip)
            optimizer.step()
            step += 1
            running.append(float(loss.detach()))
            bar.set_postfix(loss=f"{np.mean(running[-20:]):.4f}")
            bar.update(1)
            out_of_time = options.max_minutes is not None and time.monotonic() - start > options.max_minutes * 60
            if step % eval_every == 0 or step == total or out_of_time:
                stop = judge.evaluate(step, running, time.monotonic() - start, options.patience)
                running = []
            if stop or step >= total or out_of_time:
                stop = stop or out_of_time
                break
    bar.close()
    if judge.best_state is not None:
        model.load_state_dict(judge.best_state)
    model.eval()
    return FinetuneResult(model=model, best=judge.best, history=judge.history, steps=step,
                          seconds=time.monotonic() - start)


class _DevJudge:
    """The dev evaluations of a fine-tuning run: their history, the best one and its weights, early stopping."""

    def __init__(self, model: FineTuned, head: HeadConfig, rows: list[list[int]], labels: Tensor, metric: str,
                 per_epoch: int, total: int, log: Any) -> None:
        self.model, self.head, self.rows, self.labels, self.metric = model, head, rows, labels, metric
        self.per_epoch, self.total, self.log = per_epoch, total, log
        self.history: list[dict[str, Any]] = []
        self.best: dict[str, Any] = {}
        self.best_state: dict[str, Tensor] | None = None
        self.bad = 0

    def evaluate(self, step: int, running: list[float], seconds: float, patience: int | None) -> bool:
        """Evaluate on dev, keep the weights if they are the best so far, log a line; True = stop early."""
        scores = metrics(self.head, predict_rows(self.model, self.rows), self.labels.numpy())
        record = {"step": step, "epoch": round(step / self.per_epoch, 3), "train_loss": float(np.mean(running)),
                  **{f"dev_{k}": v for k, v in scores.items()}, "seconds": round(seconds, 1)}
        self.history.append(record)
        improved = not self.best or scores[self.metric] > self.best[f"dev_{self.metric}"]
        if improved:
            self.best, self.bad = record, 0
            self.best_state = copy.deepcopy({k: v.detach().cpu() for k, v in self.model.state_dict().items()})
        else:
            self.bad += 1
        self.log(f"step {step}/{self.total} epoch {record['epoch']:g} train loss {record['train_loss']:.4f} "
                 + " ".join(f"dev {k} {v:.4f}" for k, v in scores.items()) + (" *" if improved else ""))
        if patience is not None and self.bad >= patience:
            self.log(f"early stopping: no better dev {self.metric} in {self.bad} evaluations")
            return True
        return False
