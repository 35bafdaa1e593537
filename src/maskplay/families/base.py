"""The family contract: everything a family decides, in one base class, and the registry it joins.

A family is a mask, a choice of what the queries start from and a choice of targets (its `forward` and
`training_batch`), plus the rules below, each with the default most families share. A subclass with a `family`
name registers itself (registry.py); tasks (score, embed, generate, finetune, train, eval) and the command line
look a family up by name there and ask it, so no module outside families/ compares family names.

    rule                          attribute / method                 default
    ----------------------------  ---------------------------------  --------------------------------------
    config rules                  check_config(config), two_streams  none; one stream
                                  xl_positions                       no transformer-xl on one stream
    own settings                  settings: a dataclass, declared    none
                                  beside the class ([model.<family>],
                                  config.<family>)
    left-to-right (T5 buckets,    causal                             False
      windows, minicons' class)
    scoring                       score_rules (nn.score_rules'       PLL and PLL-word; the head at the
                                  ScoreRule; first = auto;           position itself
                                  score_methods are
                                  their names),
                                  score_positions(run, ..., rule),
                                  pll_hidden(run, ...),
                                  masked_lm(), memory_length(),
                                  memory_pass(run, ...)
    fine-tuning / embedding       default_pooling, pair_segments,    "first"; no segments; forward as is
                                  downstream_kwargs(types),
                                  embedding_kwargs(diagonal_mask),
                                  for_finetuning()
    generation                    can_generate, prefill, step,       cannot; [SOS] text
                                  generation_frame(tokenizer),
                                  generated_token_type
    training                      num_targets(batch),                labelled tokens; the head at 15 %
                                  predicted_fraction, parts,
                                  set_training_progress(fraction)
    pictures / commands           masks_shown, growable,             -
                                  seq2seq_overrides
    HuggingFace conversion        families/hf/<family>.py            no twin
    HuggingFace custom code       hf_code                            none (export refuses)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

from ..config import ModelConfig
from ..nn.masks import MaskPicture
from ..nn.modeling import IGNORE_INDEX, ModelBase
from ..nn.pass_modes import LastLayerRows
from ..nn.score_rules import PLL_RULES, PassRunner, ScoreRule
from ..registry import FAMILIES, family_names, register
from ..runtime.files import model_file
from ..runtime.model_dir import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    check_buffers,
    check_sizes_fit,
    is_hf_directory,
    read_model_config,
    read_shapes,
    resolve_model_dir,
)


class MaskplayModel(ModelBase):
    family: ClassVar[str] = ""
    two_streams: ClassVar[bool] = False
    xl_positions: ClassVar[bool] = False  # its one stream may take positions = "transformer-xl" (the encoder's frame)
    # the family's own config section, a dataclass: [model.<family>] in a TOML file, "<family>" in config.json,
    # config.<family> in code ("-" read as "_": registry.section_name); every ModelConfig holds every family's
    settings: ClassVar[type | None] = None
    causal: ClassVar[bool] = False
    # how the family scores (score_rules.ScoreRule, declared here and in each family's file); the first is "auto"
    score_rules: ClassVar[tuple[ScoreRule, ...]] = PLL_RULES
    score_methods: ClassVar[tuple[str, ...]] = tuple(rule.name for rule in PLL_RULES)  # the rules' names
    masked_lm_method: ClassVar[str | None] = None  # minicons' MaskedLMScorer default, where not the first method
    default_pooling: ClassVar[str] = "first"
    pair_segments: ClassVar[bool] = False  # a text pair's second text gets segment 1 when the model has segments
    can_generate: ClassVar[bool] = False  # set for each subclass: True when it writes prefill and step
    generated_token_type: ClassVar[int | None] = None
    growable: ClassVar[bool] = False
    has_diagonal_switch: ClassVar[bool] = False  # forward(diagonal_mask=...): T-TA's own token, hidden or seen
    predicted_fraction: ClassVar[float] = 0.15  # share of tokens at which training applies the LM head (FLOPs)
    parts: ClassVar[tuple[str, ...]] = ()  # towers `export` can write alone (ELECTRA's generator, discriminator)
    seq2seq_overrides: ClassVar[tuple[str, ...]] = ()  # config overrides `seq2seq train` adds for this family
    masks_shown: ClassVar[tuple[MaskPicture, ...]] = ()
    # how HuggingFace custom code (maskplay.tasks.export) reads the family: "mask" (AutoModel, AutoModelForMaskedLM),
    # "causal_mask" (AutoModelForCausalLM; None: no generation), "query_stream" (T-TA's), "segments" (where token
    # types come from: given / after_separator / none), "lm_head" (False: AutoModel only); None: the family has no
    # custom-code export
    hf_code: ClassVar[dict[str, Any] | None] = None
    trains_with_memory: ClassVar[bool] = False  # forward(mems=..., memory_length=...): Transformer-XL's recurrence
    # set on a model read from a HuggingFace directory (families/hf/directory.py): why it cannot score (a headless
    # encoder: its LM head is zero), and the pooling its sentence-transformers modules ask for
    no_lm_head: str | None = None
    hf_pooling: str | None = None
    hf_normalize: bool = False  # its sentence-transformers modules end with a Normalize (unit-length embeddings)
    # HuggingFace pads embedding tables beyond the tokenizer (DeBERTa-v3: 128,100 rows, 128,001 pieces); the rows no
    # piece reads still enter the softmax, so the table stays and a smaller tokenizer is accepted
    vocabulary_padded: bool = False
    # reads a HuggingFace directory: families/hf/directory.py's load_hf_model, set when families/hf is imported
    # (families/__init__.py imports it), so that this module does not import the converters that import it
    hf_reader: ClassVar[Callable[[Path], MaskplayModel] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # a family generates when it writes both generation hooks
        cls.can_generate = cls.prefill is not MaskplayModel.prefill and cls.step is not MaskplayModel.step
        cls.score_methods = tuple(rule.name for rule in cls.score_rules)
        if cls.__dict__.get("family"):
            register(cls)

    def __init__(self, config: ModelConfig) -> None:
        if config.family != self.family:
            raise ValueError(f"{type(self).__name__} needs a config with family={self.family!r}, "
                             f"got {config.family!r}")
        super().__init__(config, causal=self.causal)

    # ---- config -------------------------------------------------------------------------------------------

    @classmethod
    def check_config(cls, config: ModelConfig) -> None:
        """Refuse the switch combinations this family cannot run (one-line ValueError); the core has checked the
        rest."""

    # ---- scoring ------------------------------------------------------------------------------------------

    @classmethod
    def score_rule(cls, name: str) -> ScoreRule:
        """The family's rule called `name` (one of score_methods)."""
        for rule in cls.score_rules:
            if rule.name == name:
                return rule
        raise ValueError(f"method {name!r} does not apply to a {cls.family!r} model; it has {list(cls.score_methods)}")

    def score_positions(self, run: PassRunner, ids: Tensor, attention_mask: Tensor, rows: Tensor, cols: Tensor,
                        targets: Tensor, rule: ScoreRule) -> Tensor:
        """log p(targets) at (rows, cols) in one forward pass by a one-pass rule (maskplay.tasks.score.passes.
        position_log_probs): by default what the rule declares (ScoreRule.read); a family overrides it for a
        reading no rule can state."""
        return rule.read(run, ids, attention_mask, rows, cols, targets)

    def pll_hidden(self, run: PassRunner, ids: Tensor, attention_mask: Tensor, pos: Tensor, end: Tensor,
                   offset: int | None = None) -> Tensor:
        """The outputs (B, H) that predict the piece at `pos` with the pieces pos..end-1 of each row hidden (PLL,
        one copy per row): [MASK] in their place; the last block and the head run at `pos` + offset alone (offset:
        the PLL rule's, default the family's "pll" rule's). A family with a PLL rule and this default takes
        `last_layer_rows` in its forward and hands it to encode_under."""
        columns = torch.arange(ids.shape[1], device=ids.device)[None, :]
        hide = (columns >= pos[:, None]) & (columns < end[:, None])
        masked = ids.masked_fill(hide, self.config.mask_token_id)
        offset = self.score_rule("pll").offset if offset is None else offset
        rows = LastLayerRows(pos).shifted(offset)
        return run.forward(masked, attention_mask=attention_mask, last_layer_rows=rows).last_hidden_state[:, 0]

    def masked_lm(self, memo: Callable[[str, Callable[[Any], Any]], Any]) -> MaskplayModel:
        """The model a PLL runs on (ELECTRA: its generator). memo(kind, make) returns make(self), made once while
        the weights stay the same (the scorer's cache of derived copies)."""
        return self

    @classmethod
    def check_memory(cls, config: ModelConfig) -> None:
        """Refuse (one line) a config that cannot train with Transformer-XL's memory (run.memory_length): every
        config of a family without it; a family whose forward takes `mems` and `memory_length` sets
        trains_with_memory, and overrides this where some of its configs cannot."""
        if cls.trains_with_memory:
            return
        with_memory = [n for n in family_names() if family_class(n).trains_with_memory]
        raise ValueError(f"family {cls.family} has no Transformer-XL memory in training (run.memory_length); "
                         f"families with it: {', '.join(with_memory)}")

    def memory_length(self) -> int | None:
        """Tokens of Transformer-XL memory scoring may carry between segments (None: this family has none)."""
        return None

    def memory_pass(self, run: PassRunner, ids: Tensor, attention_mask: Tensor, mems: list[Tensor],
                    memory_tokens: int) -> tuple[Tensor, list[Tensor], int]:
        """One segment of scoring with memory (score/memory.py, overflow='memory'), right-padded rows: the outputs
        (B, L, H) the head reads, each layer's memory for the next segment (the caller cuts it to memory_tokens)
        and the shift s, output p predicting the token at p + s. The default: a two-stream family's query stream
        left to right (forward's left_to_right view), output p predicting token p (s = 0)."""
        out = run.forward(ids, attention_mask=attention_mask, left_to_right=True, mems=mems)
        return out.last_hidden_state, out.mems, 0

    # ---- fine-tuning and embedding ------------------------------------------------------------------------

    def downstream_kwargs(self, input_ids: Tensor, token_type_ids: Tensor | None) -> dict[str, Any]:
        """forward()'s extra arguments when a fine-tuned head reads the last hidden state."""
        return {}

    def embedding_kwargs(self, diagonal_mask: bool = True) -> dict[str, Any]:
        """forward()'s extra arguments when an embedder reads the hidden states."""
        if not diagonal_mask:
            raise ValueError(f"diagonal_mask=False applies to T-TA only; this model is {self.family!r}")
        return {}

    def for_finetuning(self) -> MaskplayModel:
        """The model a fine-tuning head sits on, its LM head removed (the model itself, changed in place)."""
        self.head = torch.nn.Identity()
        return self

    # ---- generation ---------------------------------------------------------------------------------------

    def generation_frame(self, tokenizer: Any) -> tuple[list[int], list[int]]:
        """How a text becomes a prompt: (prefix ids, suffix ids) around its pieces."""
        return [self.config.sos_token_id], []

    def prefill(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> Any:
        raise ValueError(f"a {self.family!r} model cannot generate text")

    def step(self, new_ids: Tensor, cache: Any, new_mask: Tensor | None = None) -> Tensor:
        raise ValueError(f"a {self.family!r} model cannot generate text")

    # ---- training -----------------------------------------------------------------------------------------

    def set_training_progress(self, fraction: float) -> None:
        """The trainer says how much of training is done (0..1, a function of the step, so resumes stay exact)
        before each step's batches: for an objective that changes over training (GPT-BERT's masking rate)."""

    def num_targets(self, batch: dict[str, Tensor]) -> int:
        """How many target tokens model(**batch).loss averages over, read from the labels."""
        return int((batch["labels"] != IGNORE_INDEX).sum())

    @classmethod
    def training_flops_per_token(cls, config: ModelConfig, seq_len: int) -> float | None:
        """A family whose step is not the one-tower formula of maskplay.runtime.flops says what it is (None: that
        formula)."""
        return None

    # ---- loading ------------------------------------------------------------------------------------------

    def generate(self, inputs: Any, **options: Any) -> Any:
        """Continue texts or token ids: maskplay.tasks.decoding.generate (greedy, beam search, sampling; a key/value
        cache). A family that cannot generate raises ValueError naming the families that can."""
        from ..tasks.decoding import generate  # a task: imported when asked for (pyproject.toml lets this one import up)

        return generate(self, inputs, **options)

    @classmethod
    def from_pretrained(cls, directory: str | Path, **config_overrides: Any) -> MaskplayModel:
        """Load a model saved by save_pretrained, from a directory or a hub name ("org/name", fetched with
        huggingface_hub). Called on MaskplayModel it builds the saved family. A HuggingFace model directory is
        converted in memory (families/hf/directory.py; one line on stderr says so)."""
        directory = resolve_model_dir(directory)
        if is_hf_directory(directory):
            return cls._from_hf_directory(directory, config_overrides)
        config = read_model_config(directory, **config_overrides)
        weights_path = model_file(directory, WEIGHTS_NAME)  # not a symbolic link out of the directory
        if not weights_path.is_file():
            raise FileNotFoundError(f"{weights_path} not found: is {directory} a directory written by save_pretrained?")
        model_cls = cls if cls.family else family_class(config.family)
        check_against_weights(model_cls, config, weights_path, str(directory / CONFIG_NAME))
        model = model_cls(config)
        model.load_weights(weights_path)
        return model

    @classmethod
    def _from_hf_directory(cls, directory: Path, config_overrides: dict[str, Any]) -> MaskplayModel:
        if MaskplayModel.hf_reader is None:
            raise ValueError(f"{directory} is a HuggingFace directory: import maskplay.families to read it")
        model = MaskplayModel.hf_reader(directory)
        if cls.family and model.config.family != cls.family:
            raise ValueError(f"{directory} converts to a {model.config.family} model, not a {cls.family} one; "
                             "load it with MaskplayModel.from_pretrained")
        if config_overrides:  # e.g. dropout for fine-tuning: the same weights under the changed config
            import dataclasses

            changed = type(model)(dataclasses.replace(model.config, **config_overrides))
            changed.load_strict(model.state_dict(), source=f"{directory} (converted)")
            changed.no_lm_head, changed.hf_pooling = model.no_lm_head, model.hf_pooling
            changed.vocabulary_padded, changed.hf_normalize = model.vocabulary_padded, model.hf_normalize
            model = changed
        return model


class _NoRandomInitOnMeta(torch.overrides.TorchFunctionMode):
    """Random initialisers (nn.init.normal_, Tensor.uniform_, ...) on a meta tensor return it as it is: there is
    nothing to fill, and torch's meta kernels for them import torch._dynamo on first use (seconds of a command's
    start). Shapes and dtypes are the same; any other function runs as usual."""

    RANDOM = frozenset({"normal_", "uniform_", "trunc_normal_", "xavier_uniform_", "xavier_normal_",
                        "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "sparse_"})

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in self.RANDOM:
            tensor = args[0] if args else kwargs.get("tensor", kwargs.get("self"))
            if isinstance(tensor, Tensor) and tensor.is_meta:
                return tensor
        return func(*args, **kwargs)


def check_against_weights(model_cls: type[MaskplayModel], config: ModelConfig, weights_path: Path,
                          config_source: str) -> None:
    """Compare the model `config` builds with the shapes the safetensors header declares, before anything is
    allocated: coarse bounds first (check_sizes_fit: a config.json of hidden_size 1e9 or num_layers 1e6 must not
    even build a skeleton), then every tensor of a skeleton built on the meta device (no memory) against the
    header, and the computed tables' size. A mismatch is one ValueError naming config.json."""
    shapes = read_shapes(weights_path)
    check_sizes_fit(config, shapes, config_source, str(weights_path))
    try:
        with torch.device("meta"), _NoRandomInitOnMeta():
            skeleton = model_cls(config)
    except (RuntimeError, TypeError, ValueError, OverflowError) as err:
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"{config_source}: its sizes build no model ({detail})"[:300]) from None
    expected = {k: tuple(v.shape) for k, v in skeleton.state_dict().items()}
    missing = sorted(set(expected) - set(shapes))
    unexpected = sorted(set(shapes) - set(expected))
    wrong = [f"{k}: {list(shapes[k])} in the file, {list(expected[k])} by the config" for k in expected
             if k in shapes and shapes[k] != expected[k]]
    if missing or unexpected or wrong:
        first = wrong[0] if wrong else f"missing {missing[:3]}" if missing else f"unexpected {unexpected[:3]}"
        raise ValueError(f"{config_source} does not match {weights_path} ({len(wrong) + len(missing) + len(unexpected)} "
                         f"tensors differ; first {first})")
    check_buffers({k: (tuple(b.shape), b.element_size()) for k, b in skeleton.named_buffers()},
                  weights_path.stat().st_size, config_source)


def family_class(family: str) -> type[MaskplayModel]:
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose one of {sorted(family_names())}")
    return FAMILIES[family]


def build_model(config: ModelConfig) -> MaskplayModel:
    return family_class(config.family)(config)


def families() -> list[type[MaskplayModel]]:
    return [FAMILIES[name] for name in family_names()]
