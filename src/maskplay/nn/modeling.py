"""The model base every family builds on: construction, initialisation, input checks, the loss, and saving
(safetensors weights + JSON config; loading is strict and never unpickles). What a family decides is in
maskplay.families.base (the family contract)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import ClassVar

import torch
from safetensors.torch import save_file
from torch import Tensor, nn

from ..config import ModelConfig
from ..runtime.files import atomic_path
from ..runtime.model_dir import CONFIG_NAME, WEIGHTS_NAME, read_weights, write_model_manifest
from .backbone import Embeddings, Encoder
from .heads import make_lm_head
from .masks import MaskMod, and_masks, materialize, no_padding, padding, rows_without_padding, sdpa_kind
from .outputs import ModelOutput, Targets
from .pass_modes import LastLayerRows, Packed, PassMode, WithMemory
from .positions import Disentangled, RelativePositions

IGNORE_INDEX = -100


def scale_feed_forward_init_(encoder: nn.Module) -> None:
    """GPT-BERT's depth scaling: the feed-forward weights of layer i (from 0) times sqrt(1 / (2 (i + 1))), after the
    initialisation (a shared block, share_layers, once, as layer 0)."""
    for index, block in enumerate(dict.fromkeys(encoder.layers)):
        for linear in block.ffn.linears():
            linear.weight.data.mul_(math.sqrt(1.0 / (2.0 * (index + 1))))


class ModelBase(nn.Module):
    family: ClassVar[str] = ""

    def __init__(self, config: ModelConfig, causal: bool = False) -> None:
        """causal: the family reads left to right (T5's relative buckets are then one-directional)."""
        super().__init__()
        self.config = config
        self.embeddings = self.make_embeddings(config)
        # embeddings narrower (or wider) than the blocks: one projection into the hidden size
        width = config.embedding_width
        self.embeddings_project = nn.Linear(width, config.hidden_size) if width != config.hidden_size else None
        self.encoder = Encoder(config, causal=causal)
        self.head = self.make_head(config)
        self.apply(self._init_weights)
        if config.weight_init == "truncated-depth-scaled":
            scale_feed_forward_init_(self.encoder)
        if config.norm_placement == "deepnorm":
            from .norms import deepnorm_init_

            deepnorm_init_(self.encoder, config.num_layers)

    def make_embeddings(self, config: ModelConfig) -> nn.Module:
        """The family's input embeddings; BERT's (token + position [+ segment], LayerNorm) unless it says otherwise."""
        return Embeddings(config)

    def make_head(self, config: ModelConfig) -> nn.Module:
        """The family's output head; the tied masked-LM head (or the plain one config.lm_head names) unless a family
        says otherwise."""
        return make_lm_head(config)

    def encode_under(self, structure: MaskMod, input_ids: Tensor, attention_mask: Tensor,
                     token_type_ids: Tensor | None = None, output_hidden_states: bool = False,
                     last_layer_rows: LastLayerRows | None = None,
                     memory: list[Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, ...] | None]:
        """The backbone on one stream under a structural mask (joined with the padding here): what BERT,
        UniLM, ELECTRA's discriminator and GPT share; the family's mask is the only difference. `memory`
        (pass_modes.WithMemory): keys that every query of the segment sees, before its own. `last_layer_rows`
        (pass_modes.LastLayerRows): the last block at one position per row."""
        B, L = input_ids.shape
        mask = materialize(and_masks(structure, padding(attention_mask)), B, L, device=input_ids.device)
        kind = None
        if memory is not None and memory[0].shape[1]:
            seen = mask.new_ones(1, 1, 1, memory[0].shape[1]).expand(B, 1, L, -1)
            mask = torch.cat([seen, mask.expand(B, -1, -1, -1)], dim=-1)
        else:  # SDPA told "causal" or "full" instead of the mask where that is exact (once per batch, here)
            kind = sdpa_kind(structure, attention_mask, self.training) if self.encoder.reads_mask_kind else None
        mode = WithMemory(memory) if memory is not None else self.pass_mode(attention_mask, last_layer_rows)
        return self.encoder(self.embed(input_ids, token_type_ids), mask, output_hidden_states=output_hidden_states,
                            mode=mode, mask_kind=kind)

    def embed(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
              dropout: nn.Module | None = None) -> Tensor:
        """The embedding output at the hidden size: what the first block reads."""
        x = self.embeddings(input_ids, token_type_ids, dropout=dropout)
        return x if self.embeddings_project is None else self.embeddings_project(x)

    def _init_weights(self, module: nn.Module) -> None:
        """BERT's: normal(initializer_range) weights and embeddings, zero biases; weight_init =
        "truncated-depth-scaled": truncated normal, std sqrt(2 / (5 hidden)), at +-2 std (GPT-BERT's, whose
        feed-forward scaling follows the apply)."""
        truncated = self.config.weight_init == "truncated-depth-scaled"
        std = math.sqrt(2.0 / (5.0 * self.config.hidden_size)) if truncated else self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            if truncated:
                nn.init.trunc_normal_(module.weight, std=std, a=-2 * std, b=2 * std)
            else:
                nn.init.normal_(module.weight, std=std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            if module.elementwise_affine:  # norm_affine = false: no gain or bias to set
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        elif isinstance(module, RelativePositions):
            module.reset_parameters(std)
        elif isinstance(module, Disentangled):
            module.reset_parameters(std, truncated)

    # ---- inputs -------------------------------------------------------------------------------------

    def check_inputs(self, input_ids: Tensor, attention_mask: Tensor | None) -> Tensor:
        """Validate a batch and return its attention mask ((B, L) bool; default: ids != [PAD])."""
        cfg = self.config
        if not isinstance(input_ids, Tensor) or input_ids.dim() != 2:
            raise ValueError("input_ids must be a 2-D (batch, length) tensor of token ids, got "
                             f"{getattr(input_ids, 'shape', type(input_ids))}")
        batch, length = input_ids.shape
        if batch == 0 or length == 0:
            raise ValueError(f"empty batch: input_ids has shape {tuple(input_ids.shape)}")
        if length > cfg.max_position:
            raise ValueError(f"sequence length {length} exceeds the model's {cfg.max_position} positions; "
                             "truncate or split the input")
        if input_ids.dtype not in (torch.long, torch.int, torch.int32, torch.int16, torch.uint8):
            raise ValueError(f"input_ids must be integer token ids, got dtype {input_ids.dtype}")
        if self.training and (input_ids.device.type != "cpu" or torch.compiler.is_compiling()):
            # reading the ids' range back stalls a GPU at every step (and breaks a compiled graph); training
            # batches come from a prepared corpus whose vocabulary the trainer checked against the model's
            return self._mask_of(input_ids, attention_mask)
        lo, hi = int(input_ids.min()), int(input_ids.max())
        if lo < 0 or hi >= cfg.vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(f"token id {bad} is out of range for a vocabulary of {cfg.vocab_size} "
                             f"(ids seen: {lo}..{hi})")
        return self._mask_of(input_ids, attention_mask)

    def _mask_of(self, input_ids: Tensor, attention_mask: Tensor | None) -> Tensor:
        if attention_mask is None:
            return input_ids != self.config.pad_token_id
        if attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask shape {tuple(attention_mask.shape)} differs from input_ids "
                             f"shape {tuple(input_ids.shape)}")
        return attention_mask.bool()

    def training_batch(self, input_ids: Tensor, attention_mask: Tensor,
                       generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """Turn a clean padded batch into this family's forward() arguments, labels included."""
        labels = input_ids.masked_fill(~attention_mask.bool(), IGNORE_INDEX)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}

    def known_from_host(self, batch: dict[str, Tensor]) -> AbstractContextManager[None]:
        """What the host's copy of a training_batch tells the forward of that batch, entered around it by the trainer,
        so that the forward need not read the device's copy back (a synchronisation on a GPU, a graph break under
        torch.compile): here, whether its rows have padding (masks.rows_without_padding)."""
        return rows_without_padding(no_padding(batch))

    # ---- outputs ------------------------------------------------------------------------------------

    def pass_mode(self, attention_mask: Tensor, last_layer_rows: LastLayerRows | None = None) -> PassMode | None:
        """Encoder.forward's mode for a pass over whole sequences: the last-layer rows when given; else, at inference
        (eval mode, no autograd), a batch with padding runs its per-token layers on the real tokens only (Packed:
        outputs at the padding are then zero); training keeps the padded layout."""
        if last_layer_rows is not None:
            return last_layer_rows
        if self.training or torch.is_grad_enabled():
            return None
        real = int(attention_mask.sum())
        return None if real in (0, attention_mask.numel()) else Packed(attention_mask)  # no padding, or nothing but

    @staticmethod
    def _last_layer_rows(rows: LastLayerRows | None, labels: Tensor | None) -> LastLayerRows | None:
        if rows is not None and labels is not None:
            raise ValueError("last_layer_rows (one output position per row, for scoring) cannot be combined with "
                             "labels, whose loss needs the outputs at every labelled position")
        return rows

    def logits(self, hidden: Tensor) -> Tensor:
        return self.head(hidden, self.embeddings.word.weight)

    def loss_labels(self, labels: Tensor) -> Tensor:
        """The labels the loss is over, made from the batch's (training_batch's) as the forward makes them: as
        they are here (GPT: shifted). The trainer finds their labelled positions on the host (nn/outputs.Targets)."""
        return labels

    def output(self, hidden: Tensor, labels: Tensor | None, states: tuple[Tensor, ...] | None,
               source: Tensor | None = None) -> ModelOutput:
        """The head at labelled positions only (all positions without labels), and the mean token loss. `source`:
        the batch's labels that `labels` were made from by loss_labels, where that made a new tensor."""
        if labels is None:
            return ModelOutput(logits=self._deferred_logits(hidden), last_hidden_state=hidden, hidden_states=states)
        selected = labels != IGNORE_INDEX
        if torch.compiler.is_compiling() and getattr(self, "predicted_fraction", 0.0) == 1.0:
            # a family that predicts every real token (GPT, T-TA): the head at every position, padding's ignored by
            # the cross-entropy, costs next to nothing more, and keeps a compiled graph free of the data-dependent
            # shape of hidden[selected] (a graph break, and a recompile when the count of targets changes)
            loss = self.head.loss(hidden.flatten(0, -2), self.embeddings.word.weight, labels.flatten())
            return ModelOutput(loss=loss, logits=self._deferred_logits(hidden, selected), last_hidden_state=hidden,
                               hidden_states=states)
        at = Targets.of_labels(labels, selected, source)
        selected_hidden = at.take(hidden)
        loss = self.head.loss(selected_hidden, self.embeddings.word.weight, at.take(labels))
        return ModelOutput(loss=loss, logits=self._deferred_logits(selected_hidden), last_hidden_state=hidden,
                           hidden_states=states)

    def _deferred_logits(self, hidden: Tensor, rows: Tensor | None = None) -> Callable[[], Tensor]:
        """The head's logits (at hidden[rows] where given), computed on first access (features and losses never
        need them), under the grad / inference mode of the forward pass that produced `hidden` (a compiled
        forward's: not inference, whose query dynamo cannot trace)."""
        grad = torch.is_grad_enabled()
        inference = not torch.compiler.is_compiling() and torch.is_inference_mode_enabled()

        def compute() -> Tensor:
            with torch.inference_mode(inference), torch.set_grad_enabled(grad):
                return self.logits(hidden if rows is None else hidden[rows])

        return compute

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # ---- checkpoints --------------------------------------------------------------------------------

    def save_pretrained(self, directory: str | Path, dtype: torch.dtype | None = None) -> None:
        """Write config.json and model.safetensors (optionally cast, e.g. to fp16), each atomically."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = {k: (v.to(dtype) if dtype is not None and v.is_floating_point() else v).contiguous().cpu()
                   for k, v in self.state_dict().items()}
        with atomic_path(directory / WEIGHTS_NAME) as tmp:
            save_file(tensors, str(tmp), metadata={"format": "pt", "family": self.family})
        with atomic_path(directory / CONFIG_NAME) as tmp:
            tmp.write_text(json.dumps(self.config.to_dict(), indent=2) + "\n")
        write_model_manifest(directory)

    def load_weights(self, path: str | Path, source: str | None = None) -> None:
        """Strictly load a model.safetensors (checked against its manifest), floating-point tensors as fp32 (an
        fp16 export included)."""
        state = read_weights(path)
        self.load_strict({k: v.float() if v.is_floating_point() else v for k, v in state.items()},
                         source=source or str(path))

    def load_strict(self, state: dict[str, Tensor], source: str = "state dict") -> None:
        """load_state_dict that names every missing, unexpected or misshapen weight in its error."""
        own = self.state_dict()
        missing = sorted(set(own) - set(state))
        unexpected = sorted(set(state) - set(own))
        shapes = [f"{k}: {tuple(state[k].shape)} vs {tuple(own[k].shape)}"
                  for k in own if k in state and state[k].shape != own[k].shape]
        if missing or unexpected or shapes:
            raise ValueError(f"{source} does not match {type(self).__name__}: missing {missing}, "
                             f"unexpected {unexpected}, wrong shapes {shapes}")
        self.load_state_dict(state, strict=True)
