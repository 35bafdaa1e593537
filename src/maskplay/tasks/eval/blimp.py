"""BLiMP (Warstadt et al., 2020): grammatical minimal pairs, 67 paradigms of 1,000 pairs in 12 phenomena (13 with
s-selection). The shared data holds the development half, 36 paradigms (shared/data/MANIFEST.md, blimp-dev).

The convention of the BLiMP paper and BabyLM: a pair is right when the model gives the good sentence a strictly
higher total log-probability (a tie is wrong); accuracy per paradigm, then the macro mean over paradigms. A
phenomenon's accuracy is the mean of its paradigms' accuracies. Nothing is tuned.

The model enters as a plain function, sentences -> total log-probabilities (each distinct sentence is scored once),
so this module needs no model and its logic is tested without one."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .files import base_name, lines

FOLDER = "blimp-dev"
REFERENCE_MODELS = ("5-gram", "LSTM", "Transformer-XL", "GPT-2")

# The BLiMP paper's models per paradigm, accuracy %, from alexwarstadt/blimp raw_results/summary/models_summary.jsonl
# (CC BY 4.0; columns ngram, lstm, txl, gpt2), for the 36 paradigms of the development half.
REFERENCE_PARADIGMS: dict[str, tuple[float, float, float, float]] = {
    "adjunct_island": (47.9, 67.4, 64.5, 89.4),
    "anaphor_gender_agreement": (43.9, 88.2, 91.2, 99.4),
    "animate_subject_passive": (70.3, 71.5, 74.3, 76.6),
    "causative": (53.5, 68.4, 57.5, 78.2),
    "coordinate_structure_constraint_complex_left_branch": (32.0, 30.1, 35.8, 81.0),
    "determiner_noun_agreement_1": (88.3, 91.8, 91.7, 98.8),
    "determiner_noun_agreement_irregular_1": (85.4, 81.5, 88.3, 95.7),
    "determiner_noun_agreement_with_adj_2": (49.7, 86.2, 78.1, 94.9),
    "determiner_noun_agreement_with_adj_irregular_2": (55.4, 82.9, 76.6, 94.0),
    "distractor_agreement_relational_noun": (23.5, 76.0, 77.2, 79.5),
    "ellipsis_n_bar_1": (23.4, 67.8, 65.1, 91.5),
    "existential_there_object_raising": (83.5, 65.9, 75.9, 78.4),
    "existential_there_quantifiers_1": (90.5, 96.3, 93.7, 99.5),
    "expletive_it_object_raising": (71.5, 63.0, 71.5, 79.2),
    "inchoative": (50.9, 65.3, 54.3, 65.9),
    "irregular_past_participle_adjectives": (79.4, 92.8, 90.5, 97.7),
    "irregular_plural_subject_verb_agreement_1": (72.6, 81.1, 77.6, 92.8),
    "left_branch_island_echo_question": (95.8, 31.6, 63.0, 52.3),
    "matrix_question_npi_licensor_present": (1.2, 1.6, 0.7, 65.4),
    "npi_present_2": (46.9, 53.9, 48.2, 64.3),
    "only_npi_scope": (29.8, 36.4, 45.3, 78.5),
    "passive_1": (89.2, 71.9, 80.6, 89.3),
    "principle_A_c_command": (57.8, 58.8, 60.8, 73.7),
    "principle_A_case_2": (48.9, 87.3, 95.3, 94.8),
    "principle_A_domain_2": (56.4, 68.3, 69.7, 77.5),
    "principle_A_reconstruction": (40.4, 46.4, 37.9, 46.8),
    "regular_plural_subject_verb_agreement_1": (75.5, 89.0, 73.1, 96.7),
    "sentential_negation_npi_scope": (44.7, 23.2, 53.3, 73.2),
    "sentential_subject_island": (60.5, 42.8, 36.5, 35.5),
    "superlative_quantifiers_1": (44.7, 62.8, 84.3, 87.0),
    "tough_vs_raising_2": (77.4, 93.0, 86.1, 88.9),
    "transitive": (70.8, 64.7, 75.8, 86.0),
    "wh_questions_object_gap": (52.7, 79.4, 60.7, 84.2),
    "wh_questions_subject_gap_long_distance": (85.6, 95.6, 86.2, 87.1),
    "wh_vs_that_no_gap_long_distance": (81.0, 97.3, 91.2, 93.8),
    "wh_vs_that_with_gap_long_distance": (20.0, 13.7, 17.2, 56.3),
}


@dataclass(frozen=True)
class BlimpPair:
    good: str
    bad: str
    paradigm: str  # UID
    phenomenon: str  # linguistics_term
    field: str = ""


def _optional_string(d: dict[str, Any], key: str, default: str, where: str) -> str:
    value = d.get(key, default)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: {key} must be a non-empty string, got {value!r}")
    return value


def load_blimp_file(path: str | Path) -> list[BlimpPair]:
    """One BLiMP JSONL file (plain or gzip): an object a line with non-empty strings sentence_good and
    sentence_bad; UID (the paradigm) defaults to the file's base name, linguistics_term (the phenomenon) to the
    paradigm; other fields are ignored. Blank lines are allowed; any other bad line is an error naming it."""
    path, pairs = Path(path), []
    for number, line in enumerate(lines(path), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            d = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}: invalid JSON: {err.msg}") from None
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(d).__name__}")
        for key in ("sentence_good", "sentence_bad"):
            if key not in d:
                raise ValueError(f"{where}: no {key} field (a BLiMP line has sentence_good and sentence_bad)")
            _optional_string(d, key, "", where)
        paradigm = _optional_string(d, "UID", base_name(path), where)
        phenomenon = _optional_string(d, "linguistics_term", paradigm, where)
        field = d.get("field", "")
        pairs.append(BlimpPair(d["sentence_good"], d["sentence_bad"], paradigm, phenomenon,
                               field if isinstance(field, str) else ""))
    if not pairs:
        raise ValueError(f"{path}: no pairs")
    return pairs


def load_blimp(paths: Sequence[str | Path], limit: int | None = None) -> list[BlimpPair]:
    """The pairs of several files, keeping the first `limit` pairs of each paradigm. A paradigm filed under two
    phenomena is an error (its accuracy would count twice)."""
    if limit is not None and limit < 1:
        raise ValueError(f"--limit must be at least 1, got {limit}")
    kept: list[BlimpPair] = []
    counts: dict[str, int] = {}
    phenomenon: dict[str, tuple[str, Path]] = {}
    for path in map(Path, paths):
        for pair in load_blimp_file(path):
            seen = phenomenon.setdefault(pair.paradigm, (pair.phenomenon, path))
            if seen[0] != pair.phenomenon:
                raise ValueError(f"{path}: paradigm {pair.paradigm} is under phenomenon {pair.phenomenon!r} here "
                                 f"and {seen[0]!r} in {seen[1]}")
            if limit is None or counts.get(pair.paradigm, 0) < limit:
                counts[pair.paradigm] = counts.get(pair.paradigm, 0) + 1
                kept.append(pair)
    return kept


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def evaluate_blimp(score: Callable[[list[str]], Sequence[float]], pairs: Sequence[BlimpPair]) -> dict[str, Any]:
    """Accuracy % per paradigm and per phenomenon (the mean of its paradigms), the macro mean over paradigms (the
    headline), the pooled (micro) accuracy, and the counts of pairs, right answers and ties. `score` gets every
    distinct sentence once and returns its total log-probability."""
    if not pairs:
        raise ValueError("no pairs to evaluate")
    texts = sorted({s for p in pairs for s in (p.good, p.bad)})
    values = list(score(texts))
    if len(values) != len(texts):
        raise ValueError(f"the score function returned {len(values)} values for {len(texts)} sentences")
    for text, value in zip(texts, values, strict=True):
        if not math.isfinite(value):  # a nan would lose every comparison it is in, silently
            raise ValueError(f"the model scored {text!r} as {value}: non-finite log-probability")
    logp = dict(zip(texts, values, strict=True))
    paradigms: dict[str, dict[str, Any]] = {}
    for p in pairs:
        r = paradigms.setdefault(p.paradigm, {"phenomenon": p.phenomenon, "field": p.field, "pairs": 0, "right": 0,
                                              "ties": 0})
        r["pairs"] += 1
        r["right"] += logp[p.good] > logp[p.bad]
        r["ties"] += logp[p.good] == logp[p.bad]
    for r in paradigms.values():
        r["accuracy"] = 100.0 * r["right"] / r["pairs"]
    groups: dict[str, list[str]] = {}
    for name, r in sorted(paradigms.items()):
        groups.setdefault(r["phenomenon"], []).append(name)
    phenomena = {term: {"accuracy": _mean([paradigms[n]["accuracy"] for n in names]), "paradigms": len(names),
                        **{k: sum(paradigms[n][k] for n in names) for k in ("pairs", "right", "ties")}}
                 for term, names in sorted(groups.items())}
    totals = {k: sum(r[k] for r in paradigms.values()) for k in ("pairs", "right", "ties")}
    return {"macro_accuracy": _mean([r["accuracy"] for r in paradigms.values()]),
            "micro_accuracy": 100.0 * totals["right"] / totals["pairs"],
            "phenomenon_mean": _mean([r["accuracy"] for r in phenomena.values()]),
            **totals, "sentences": len(texts), "paradigms": dict(sorted(paradigms.items())), "phenomena": phenomena}


def check_result(result: Any) -> None:
    """An evaluate_blimp result as read back from a file (`eval blimp-plot`): a ValueError saying what is wrong
    with it, so that a hand-edited or foreign file is one line, not a KeyError or a division by zero later."""
    def number(value: Any, where: str) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{where} is {value!r}, not a finite number")

    if not isinstance(result, dict):
        raise ValueError("results is not an object")
    number(result.get("macro_accuracy"), "results.macro_accuracy")
    phenomena, paradigms = result.get("phenomena"), result.get("paradigms")
    for name, value in (("phenomena", phenomena), ("paradigms", paradigms)):
        if not isinstance(value, dict) or not value or not all(isinstance(v, dict) for v in value.values()):
            raise ValueError(f"results.{name} is not an object of {name}")
    for term, r in phenomena.items():
        number(r.get("accuracy"), f"results.phenomena[{term!r}].accuracy")
    for name, r in paradigms.items():
        number(r.get("accuracy"), f"results.paradigms[{name!r}].accuracy")
        if r.get("phenomenon") not in phenomena:
            raise ValueError(f"results.paradigms[{name!r}] is under phenomenon {r.get('phenomenon')!r}, which "
                             "results.phenomena does not list")
    empty = sorted(set(phenomena) - {r["phenomenon"] for r in paradigms.values()})
    if empty:
        raise ValueError(f"results.phenomena lists {empty[0]!r}, which no paradigm is under")


def reference_points(result: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
    """The BLiMP paper's four models on exactly the paradigms of `result` (an evaluate_blimp result), by the same
    means: {model: {"macro_accuracy", "phenomena": {phenomenon: accuracy}}}; None when a paradigm is not one of
    the development half's 36 (their numbers are over all 1,000 pairs of each, whatever --limit was)."""
    names = list(result["paradigms"])
    if not names or any(n not in REFERENCE_PARADIGMS for n in names):
        return None
    out: dict[str, dict[str, Any]] = {}
    for k, model in enumerate(REFERENCE_MODELS):
        phenomena = {term: round(_mean([REFERENCE_PARADIGMS[n][k] for n in names
                                        if result["paradigms"][n]["phenomenon"] == term]), 2)
                     for term in result["phenomena"]}
        out[model] = {"macro_accuracy": round(_mean([REFERENCE_PARADIGMS[n][k] for n in names]), 2),
                      "phenomena": phenomena}
    return out


def format_table(result: dict[str, Any], per_paradigm: bool = False) -> list[str]:
    """The per-phenomenon table (with the paradigms under each phenomenon when asked), the macro mean, and the
    reference models' numbers on the same paradigms where they exist."""
    refs = reference_points(result)
    ref_head = "".join(f"{_short(m):>7}" for m in REFERENCE_MODELS) if refs else ""
    width = max(28, *(len(n) + 4 for n in (result["paradigms"] if per_paradigm else result["phenomena"])))
    out = [f"{'phenomenon' + (' / paradigm' if per_paradigm else ''):<{width}}{'pairs':>7}{'ties':>6}{'acc %':>8}"
           + (f"  | {ref_head}" if refs else "")]
    for term, r in result["phenomena"].items():
        ref = "".join(f"{refs[m]['phenomena'][term]:>7.1f}" for m in REFERENCE_MODELS) if refs else ""
        out.append(f"{term:<{width}}{r['pairs']:>7}{r['ties']:>6}{r['accuracy']:>8.1f}" + (f"  | {ref}" if refs else ""))
        for name, p in result["paradigms"].items() if per_paradigm else ():
            if p["phenomenon"] == term:
                ref = "".join(f"{REFERENCE_PARADIGMS[name][k]:>7.1f}" for k in range(4)) if refs else ""
                out.append(f"  {name:<{width - 2}}{p['pairs']:>7}{p['ties']:>6}{p['accuracy']:>8.1f}"
                           + (f"  | {ref}" if refs else ""))
    macro = result["macro_accuracy"]
    ref = "".join(f"{v['macro_accuracy']:>7.1f}" for v in (refs or {}).values())
    out.append(f"{'macro mean over ' + str(len(result['paradigms'])) + ' paradigms':<{width}}{result['pairs']:>7}"
               f"{result['ties']:>6}{macro:>8.1f}" + (f"  | {ref}" if refs else ""))
    out.append(f"(pooled over pairs {result['micro_accuracy']:.1f}; mean over {len(result['phenomena'])} phenomena "
               f"{result['phenomenon_mean']:.1f}; chance 50)")
    if refs:
        out.append("| the BLiMP paper's 5-gram, LSTM, Transformer-XL (TXL) and GPT-2 on the same paradigms "
                   "(all their pairs)")
    return out


def _short(model: str) -> str:
    return {"Transformer-XL": "TXL"}.get(model, model)
