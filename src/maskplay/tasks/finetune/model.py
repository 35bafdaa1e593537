"""The fine-tuned model: a backbone (its LM head dropped) + a classification or regression head (HeadConfig), with
its own checkpoint files. See maskplay.tasks.finetune for the poolings and heads each family is read with.

A fine-tuned model directory: config.json (the backbone's ModelConfig), head_config.json (HeadConfig),
model.safetensors (backbone.* + classifier.*, loaded strictly), manifest.json (its sha256), tokenizer.json."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import Tensor, nn

from ...config import ModelConfig, from_dict
from ...data.tokenizer import Tokenizer
from ...families import MaskplayModel, family_class
from ...registry import family_names
from ...runtime.files import atomic_path, model_file, read_json_object
from ...runtime.model_dir import (
    CONFIG_NAME,
    HEAD_CONFIG_NAME,
    WEIGHTS_NAME,
    check_sizes_fit,
    read_shapes,
    read_weights,
    resolve_model_dir,
    write_model_manifest,
)

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
        paths = [model_file(directory, n) for n in (CONFIG_NAME, HEAD_CONFIG_NAME, WEIGHTS_NAME)]
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
