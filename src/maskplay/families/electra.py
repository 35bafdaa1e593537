"""ELECTRA (Clark et al., ICLR 2020): a small BERT-MLM generator fills in the selected tokens with samples,
and the discriminator (the same backbone at full size) tells, for every real token, whether it was replaced.

Two towers of the one backbone plus a loss, as lucidrains/electra-pytorch wraps them:
- the generator is a BertMLM (the family's own code) sized by electra.generator_hidden_fraction, same depth;
- with electra.tie_embeddings the generator uses this model's embedding module (token, position and segment
  tables and their LayerNorm: the official code's shared "electra/embeddings" scope); each tower has its own
  projection when the embedding width differs from its hidden size;
- corruption as the official pretrain_helpers: mask_prob of the real non-special tokens selected, 85 % of them
  shown to the generator as [MASK], 15 % as themselves; every selected token is then replaced by a sample of
  the generator's softmax (temperature 1, drawn by inverse CDF from uniforms that training_batch draws, so the
  corruption is reproducible and device-independent); a sample equal to the original is labelled original;
- loss = generator MLM + disc_weight * binary cross-entropy of "replaced?" averaged over real tokens.

Without labels, forward runs the discriminator alone: logits (B, L) are "replaced" logits, and
last_hidden_state is the discriminator's output (what embeddings and the evaluations read).
With electra.generator = false the model is a discriminator alone (a HuggingFace ElectraForPreTraining, or the
export of one): it scores and embeds but cannot pretrain."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig
from ..nn.heads import LMHead
from ..nn.masks import MaskPicture, bidirectional
from ..nn.modeling import IGNORE_INDEX
from ..nn.outputs import ModelOutput, Targets
from ..nn.score_rules import PLL_RULES, ScoreRule
from ..runtime.flops import layer_flops
from .base import MaskplayModel
from .bert import BertMLM, mask_tokens


class ReplacedTokenHead(nn.Module):
    """Dense(H, H) -> GELU -> Dense(H, 1): the logit that a token was replaced (HuggingFace's
    ElectraDiscriminatorPredictions)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.out = nn.Linear(config.hidden_size, 1)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.out(F.gelu(self.dense(hidden))).squeeze(-1)


def generator_sizes(config: ModelConfig) -> dict[str, int]:
    """ELECTRA's generator: hidden size, heads and FFN width scaled by electra.generator_hidden_fraction, as
    the official code's get_generator_config does (heads keep their width)."""
    f = config.electra.generator_hidden_fraction
    hidden = int(round(config.hidden_size * f))
    heads = max(1, int(round(config.num_heads * f)))
    if hidden < 1 or hidden % heads:
        raise ValueError(f"electra.generator_hidden_fraction={f} gives a generator of hidden size {hidden} with "
                         f"{heads} heads (hidden_size {config.hidden_size} x {f}); choose a fraction that divides it")
    return {"hidden_size": hidden, "num_heads": heads,
            "intermediate_size": max(1, int(round(config.intermediate_size * f)))}


def generator_config(config: ModelConfig) -> ModelConfig:
    """The generator's BertMLM config: the discriminator's, scaled (generator_sizes), at the same
    embedding width; with num_kv_heads, the largest number of key/value heads that divides both the discriminator's
    and the generator's heads."""
    sizes = generator_sizes(config)
    kv = None if config.num_kv_heads is None else math.gcd(config.num_kv_heads, sizes["num_heads"])
    return dataclasses.replace(config, family="bert", embedding_size=config.embedding_width,
                               electra=ElectraConfig(), num_kv_heads=kv, **sizes)


@dataclass
class ElectraConfig:
    """ELECTRA's switches (Clark et al., 2020); read only by family="electra". The defaults are the paper's."""

    mask_prob: float = 0.15  # share of real tokens the generator fills in (the paper's large model: 0.25)
    generator_hidden_fraction: float = 0.25  # generator hidden/heads/FFN = this x the discriminator's, same depth
    disc_weight: float = 50.0  # lambda in  loss = generator MLM + lambda * discriminator BCE
    tie_embeddings: bool = True  # generator and discriminator share the token/position/segment embeddings
    all_tokens_mlm: bool = False  # the paper's "All-Tokens MLM" ablation instead of replaced-token detection
    generator: bool = True  # false: a discriminator alone (an export, or HuggingFace ElectraForPreTraining)

    def __post_init__(self) -> None:
        if not 0 < self.mask_prob < 1:
            raise ValueError(f"electra.mask_prob must be in (0, 1), got {self.mask_prob}")
        if not 0 < self.generator_hidden_fraction <= 1:
            raise ValueError("electra.generator_hidden_fraction must be in (0, 1]: a generator larger than the "
                             f"discriminator is not ELECTRA, got {self.generator_hidden_fraction}")
        if not (self.disc_weight >= 0 and math.isfinite(self.disc_weight)):
            raise ValueError(f"electra.disc_weight must be a finite number >= 0, got {self.disc_weight}")


class Electra(MaskplayModel):
    family = "electra"
    settings = ElectraConfig  # [model.electra]
    # the discriminator: how likely each token is the original, one pass; PLL runs on the generator
    score_rules = (ScoreRule("discriminator", head="original"), *PLL_RULES)
    masked_lm_method = "pll"  # a masked LM means the generator, not the discriminator
    pair_segments = True
    parts = ("generator", "discriminator")
    # custom code holds the discriminator's backbone (AutoModel: fine-tuning, embeddings), not its replaced-token
    # head; the generator leaves as a BERT masked LM (maskplay export --to-hf writes both towers)
    hf_code = {"mask": "bidirectional", "causal_mask": None, "query_stream": False, "segments": "given",
               "lm_head": False}
    masks_shown = (MaskPicture("electra", "ELECTRA: bidirectional", lambda segments, rank: bidirectional(),
                               in_all=False),)
    mask_share = 0.85  # of the selected tokens, shown to the generator as [MASK]; the rest as themselves

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        options = config.electra
        self.generator: BertMLM | None = None
        if options.generator:
            self.generator = BertMLM(generator_config(config))
            if options.tie_embeddings:
                # a reference, not a second registration: a module registered under two names is saved twice, and
                # functional_call (bf16 training) swaps its tensors twice and restores the wrong ones
                del self.generator.embeddings
                object.__setattr__(self.generator, "embeddings", self.embeddings)
        # All-Tokens MLM: a discriminator-size MLM head over every token, mixed with a copy probability
        self.mlm_head = LMHead(config) if options.all_tokens_mlm else None
        if self.mlm_head is not None:
            self.mlm_head.apply(self._init_weights)

    def make_head(self, config: ModelConfig) -> nn.Module:
        return ReplacedTokenHead(config)

    @property
    def shares_embeddings(self) -> bool:
        return self.generator is not None and self.generator.embeddings is self.embeddings

    # ---- inputs ---------------------------------------------------------------------------------------

    def training_batch(self, input_ids: Tensor, attention_mask: Tensor,
                       generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """The generator's input (selected tokens mostly [MASK]), its labels (the originals at the selected
        positions, -100 elsewhere), the clean ids, and one uniform per position for the generator's samples."""
        if self.generator is None:
            raise ValueError("this ELECTRA model is a discriminator alone (electra.generator = false): it scores "
                             "and embeds, but pretraining needs the generator")
        cfg = self.config
        masked, labels = mask_tokens(input_ids, attention_mask, cfg.special_token_ids, cfg.mask_token_id,
                                     cfg.vocab_size, cfg.electra.mask_prob, generator,
                                     mask_share=self.mask_share, random_share=0.0)
        uniforms = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)
        return {"input_ids": masked, "attention_mask": attention_mask, "labels": labels,
                "original_ids": input_ids, "sample_uniforms": uniforms}

    def num_targets(self, batch: dict[str, Tensor]) -> int:
        """The discriminator's loss averages over every real token: those are the targets the trainer counts."""
        return int(batch["attention_mask"].sum())

    # ---- the contract's rules (families/base.py) --------------------------------------------------------

    @classmethod
    def check_config(cls, config: ModelConfig) -> None:
        generator_sizes(config)  # raises if the generator cannot be built
        if config.lm_head != "mlm":  # the discriminator's head is its own; the generator's is BERT's
            raise ValueError(f"lm_head = {config.lm_head!r}: an ELECTRA model's heads are its own (BERT's for the "
                             "generator)")

    @classmethod
    def training_flops_per_token(cls, config: ModelConfig, seq_len: int) -> float:
        """ELECTRA's training step per input token: the discriminator's blocks and its replaced-token head at every
        token, the generator's blocks at every token and its vocabulary head at mask_prob of them (forward +
        backward)."""
        gen = dataclasses.replace(config, family="bert", **generator_sizes(config))
        e, h = config.embedding_width, config.hidden_size
        disc_head = 2 * h ** 2 + 2 * h
        gen_head = 2 * gen.hidden_size * e + 2 * e * config.vocab_size
        projections = 2 * e * gen.hidden_size * (gen.hidden_size != e) + 2 * e * h * (h != e)
        forward = (config.num_layers * layer_flops(config, seq_len) + disc_head
                   + gen.num_layers * layer_flops(gen, seq_len) + config.electra.mask_prob * gen_head + projections)
        return 3 * forward

    def masked_lm(self, memo: Callable[[str, Callable[[Any], Any]], Any]) -> MaskplayModel:
        if self.generator is None:
            raise ValueError("method 'pll' on an ELECTRA model runs its generator, and this model is a discriminator "
                             "alone (electra.generator = false); use method 'discriminator'")
        # a BertMLM of its own (what the scorer's copies expect), made once while the weights stay the same
        return memo("generator", lambda m: m.standalone("generator").eval())

    def downstream_kwargs(self, input_ids: Tensor, token_type_ids: Tensor | None) -> dict[str, Any]:
        return {"token_type_ids": token_type_ids}

    def for_finetuning(self) -> MaskplayModel:
        """The discriminator alone (copied out when there is a generator), without its heads."""
        model = self.standalone("discriminator") if self.generator is not None else self
        model.mlm_head = None
        model.head = nn.Identity()
        return model

    # ---- forward ----------------------------------------------------------------------------------------

    def discriminate(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None,
                     output_hidden_states: bool = False) -> tuple[Tensor, tuple[Tensor, ...] | None]:
        """The discriminator tower's output (B, L, H)."""
        return self.encode_under(bidirectional(), input_ids, attention_mask, token_type_ids, output_hidden_states)

    def logits(self, hidden: Tensor) -> Tensor:
        return self.head(hidden)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, labels: Tensor | None = None,
                token_type_ids: Tensor | None = None, output_hidden_states: bool = False,
                original_ids: Tensor | None = None, sample_uniforms: Tensor | None = None) -> ModelOutput:
        """Without labels: the discriminator on `input_ids`. With labels (training_batch's output): the
        generator on the masked `input_ids`, its samples, and the discriminator on the corrupted text."""
        attention_mask = self.check_inputs(input_ids, attention_mask)
        if labels is None:
            h, states = self.discriminate(input_ids, attention_mask, token_type_ids, output_hidden_states)
            return self.output(h, None, states)
        if self.generator is None:
            raise ValueError("this ELECTRA model has no generator (electra.generator = false): it cannot pretrain")
        if original_ids is None or sample_uniforms is None:
            raise ValueError("ELECTRA pretraining needs original_ids and sample_uniforms with the labels: build the "
                             "batch with model.training_batch(ids, attention_mask)")
        selected = labels != IGNORE_INDEX
        gen = self.generator(input_ids, attention_mask, token_type_ids=token_type_ids)
        at, real = Targets(selected), Targets(attention_mask)  # each mask's positions read back once
        gen_loss, sampled = self.generator.head.loss_and_sample(
            at.take(gen.last_hidden_state), self.generator.embeddings.word.weight, at.take(labels),
            at.take(sample_uniforms))
        corrupted, replaced = corrupt(original_ids, selected, sampled)
        replaced = real.take(replaced)
        h, states = self.discriminate(corrupted, attention_mask, token_type_ids, output_hidden_states)
        real_hidden = real.take(h)
        replaced_logits = self.head(real_hidden)
        if self.mlm_head is None:
            disc_loss = F.binary_cross_entropy_with_logits(replaced_logits.float(), replaced.float())
            loss = gen_loss + self.config.electra.disc_weight * disc_loss
            parts = {"gen_loss": gen_loss, "disc_loss": disc_loss,
                     "disc_accuracy": ((replaced_logits > 0) == replaced).float().mean(),
                     "replaced": replaced.float().mean()}
        else:
            disc_loss = self._all_tokens_loss(real_hidden, replaced_logits, replaced, original_ids[attention_mask])
            loss = gen_loss + disc_loss
            parts = {"gen_loss": gen_loss, "all_tokens_loss": disc_loss,
                     "replaced": replaced.float().mean()}
        return ModelOutput(loss=loss, logits=replaced_logits, last_hidden_state=h, hidden_states=states,
                           parts=parts)

    def _all_tokens_loss(self, hidden: Tensor, replaced_logits: Tensor, replaced: Tensor, originals: Tensor) -> Tensor:
        """The paper's All-Tokens MLM with its copy mechanism: p(original) = D [input == original] + (1 - D)
        softmax(original), D = sigmoid(-replaced logit) the probability of copying the input token."""
        logits = self.mlm_head(hidden, self.embeddings.word.weight).float()
        vocab_log_prob = logits.log_softmax(-1).gather(1, originals[:, None])[:, 0]
        z = replaced_logits.float()
        copy = F.logsigmoid(-z).masked_fill(replaced, float("-inf"))  # copying a replaced token is never right
        return -torch.logaddexp(copy, F.logsigmoid(z) + vocab_log_prob).mean()

    def standalone(self, part: str) -> MaskplayModel:
        """One tower as a model of its own: "discriminator" (an Electra with electra.generator = false, the
        weights copied) or "generator" (a BertMLM with its own copy of the embeddings)."""
        device = next(self.parameters()).device
        if part == "generator":
            if self.generator is None:
                raise ValueError("this ELECTRA model has no generator to export (electra.generator = false)")
            gen = BertMLM(self.generator.config).to(device)
            state = self.generator.state_dict()
            if self.shares_embeddings:
                state.update({f"embeddings.{k}": v for k, v in self.embeddings.state_dict().items()})
            gen.load_strict(state, source="the generator's weights")
            return gen.train(self.training)
        if part != "discriminator":
            raise ValueError(f"an ELECTRA model exports 'discriminator' or 'generator', got {part!r}")
        config = dataclasses.replace(self.config, electra=dataclasses.replace(self.config.electra, generator=False))
        disc = Electra(config).to(device)
        state = {k: v for k, v in self.state_dict().items() if not k.startswith("generator.")}
        disc.load_strict(state, source="the discriminator's weights")
        return disc.train(self.training)


def corrupt(original_ids: Tensor, selected: Tensor, sampled: Tensor) -> tuple[Tensor, Tensor]:
    """The discriminator's input (the samples, in row-major order, at the selected positions) and its labels:
    replaced where the text changed, so a sample equal to the original is labelled original. Integer ids: no
    gradient can flow from the discriminator back into the generator through them."""
    corrupted = original_ids.masked_scatter(selected, sampled)
    return corrupted, corrupted != original_ids
