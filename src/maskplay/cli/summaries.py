"""Each command's one-line summary, as `maskplay --help` lists it and its own parser takes it (help=summary(name)).

They are here, not in the commands' modules, so that `maskplay --help` and `--version` import no command: no torch,
no task. The summaries that name families read them from the registry when the families are imported already (a
family registered in this process is listed), and otherwise from BUILT_IN, the built-in seven's facts written out
(tests/cli/test_startup.py checks them against the families)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class FamilyFacts:
    names: tuple[str, ...]  # registration order
    own_scores: tuple[tuple[str, str], ...]  # (family, its first score method), families that score
    converted: tuple[str, ...]  # families with a HuggingFace twin (families/hf)
    generating: tuple[str, ...]  # can_generate, sorted


BUILT_IN = FamilyFacts(
    names=("tta", "bert", "gpt", "electra", "unilm", "xlnet", "gpt-bert"),
    own_scores=(("tta", "one-pass"), ("bert", "pll"), ("gpt", "causal"), ("electra", "discriminator"),
                ("unilm", "pll"), ("xlnet", "causal"), ("gpt-bert", "causal")),
    converted=("bert", "electra", "gpt", "xlnet"),
    generating=("gpt", "gpt-bert", "unilm"),
)


def live_facts() -> FamilyFacts:
    """The facts of the families registered in this process (imports them, and torch)."""
    from ..families import families
    from ..families.hf import converted_families
    from ..nn.generation_hooks import generating_families

    return FamilyFacts(names=tuple(cls.family for cls in families()),
                       own_scores=tuple((cls.family, cls.score_methods[0]) for cls in families() if cls.score_methods),
                       converted=tuple(converted_families()), generating=tuple(generating_families()))


def facts() -> FamilyFacts:
    return live_facts() if "maskplay.families" in sys.modules else BUILT_IN


SUMMARIES: dict[str, str | Callable[[FamilyFacts], str]] = {
    "masks": "draw a family's attention mask as a picture",
    "tokenizer": "train or inspect a WordPiece or byte-level BPE tokenizer",
    "prepare": "split corpora into sentences and tokenize them into train/valid splits",
    "pretrain": lambda f: f"pretrain a model ({', '.join(f.names)}) from a prepared corpus",
    # each family's own score
    "score": lambda f: f"sentence log-likelihoods ({', '.join(f'{name} {method}' for name, method in f.own_scores)})",
    "embed": "sentence embeddings to .npy or .jsonl",
    "eval": "evaluate a model: sts, nbest, pairs, blimp, spelling, cola, seq2seq",
    "plot-runs": "plot the held-out loss of several runs against time and tokens",
    "export": "a model to HuggingFace (custom code where it has no twin) or sentence-transformers; or one ELECTRA tower "
              "as a model directory",
    "convert": lambda f: f"convert HuggingFace checkpoints to maskplay and back (families {', '.join(f.converted)})",
    "models": "the project's models by name: list them, fetch the ones not bundled",
    "data": "data sets: titles (first paragraph -> title, from the corpora), fetch (the public evaluation sets, into the "
            "cache)",
    "seq2seq": "fine-tune UniLM (a BERT + the seq2seq mask) or GPT on source -> target pairs",
    "generate": lambda f: f"generate text with a {' or '.join(f.generating)} model (greedy, beam search, sampling)",
    "finetune": "fine-tune a model on a classification / regression / pair task",
    "predict": "run a fine-tuned model directory on a file",
    "finetune-convert": "convert a fine-tuned model to HuggingFace Bert/ElectraForSequenceClassification and back",
    "simcse": "unsupervised SimCSE: sentence embeddings from dropout noise (no labels)",
    "grow": "a bigger model computing what a smaller one computes (to continue pretraining)",
    "serve": "an HTTP server: OpenAI-shaped /v1/embeddings and /v1/completions, /v1/score, a page at / (needs "
             "maskplay[serve])",
    "lm-eval": "run lm-evaluation-harness on a maskplay model (--model maskplay)",
    "distill": "distil a masked LM's PLL into a T-TA's one pass (and `distill prepare`: its targets, stored)",
}


def summary(command: str) -> str:
    text = SUMMARIES[command]
    return text if isinstance(text, str) else text(facts())
