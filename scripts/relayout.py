"""Issue 41, item 4 ("layers you can see"): move maskplay's modules into sub-packages that are ARCHITECTURE.md's layers
and rewrite every reference to them. Re-runnable on any checkout of the repository (run it from the repository root
with a clean work tree):

    python scripts/relayout.py            # moves, rewrites, prints what it did
    python scripts/relayout.py --dry-run  # prints the plan only

The layout (ARCHITECTURE.md says why):

    maskplay/cli/        command line      (unchanged)
    maskplay/tasks/      tasks             score/ eval/ train/ finetune/ serve/ distill/ export/ + one-module tasks
    maskplay/families/   families          (unchanged)
    maskplay/nn/         core: the network (backbone, attention/, masks, positions, norms, heads, ...)
    maskplay/runtime/    core: running it  (precision, devices, files, model directories, quantisation, progress, ...)
    maskplay/data/       core: text -> tokens (tokenizer.py joins it)
    maskplay/config.py, registry.py   core (the typed config and the family table stay at the top)

What it does, in order:
1. `git mv` every moved module or package (file by file, so a package's data files move with it) and every moved
   test into tests/ folders that mirror the packages; writes the new packages' __init__.py and maskplay/_moved.py
   (the old import paths, resolved by one sys.meta_path finder with a DeprecationWarning); removes the three shim
   modules the table replaces (generation.py, convert.py, convert_xlnet.py).
2. Rewrites imports: relative ones (`from .x`, `from ..x`) by resolving them against the file's OLD place and
   writing them relative to its NEW place; absolute ones and every other dotted `maskplay.old.path` (strings for
   importlib, mock.patch and monkeypatch targets, `python -m`, docstrings, docs, Makefile, pyproject.toml);
   file paths (`src/maskplay/backbone.py`, `maskplay/attention/`, `tests/test_model.py`); moved tests'
   `Path(__file__).parents[N]`; pyproject.toml's layer contract (rewritten whole) and package data.
3. A few hand-listed fix-ups (FIXUPS) for code that finds files beside itself.

Idempotent: a move whose source is gone and whose destination exists is skipped as done; when every move is done
it says so and changes nothing. It refuses to run on a dirty work tree (so `git diff` is exactly what it did).
"""

# ruff: noqa: E501  (WRAPS quotes the over-long lines it wraps)

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = "maskplay"
SRC = Path("src") / PKG

# old module (dotted, below maskplay) -> new module; a package moves with everything below it
MOVES: dict[str, str] = {
    # core: the network
    "backbone": "nn.backbone",
    "attention": "nn.attention",
    "attention.long": "nn.attention.long_attention",  # Longformer / BigBird / banded in the backbone (not score/long)
    "positions": "nn.positions",
    "norms": "nn.norms",
    "feedforward": "nn.feedforward",
    "heads": "nn.heads",
    "masks": "nn.masks",
    "cache": "nn.cache",
    "dropout": "nn.dropout",
    "modeling": "nn.modeling",
    "outputs": "nn.outputs",
    "static_decode": "nn.static_decode",
    "generation_hooks": "nn.generation_hooks",
    # core: running it
    "precision": "runtime.precision",
    "precision_probe": "runtime.precision_probe",
    "devices": "runtime.devices",
    "files": "runtime.files",
    "model_dir": "runtime.model_dir",
    "allocator": "runtime.allocator",
    "progress": "runtime.progress",
    "quant": "runtime.quant",
    "flops": "runtime.flops",
    # item 2's scoring contract (branch h41-score), when it is there: core pieces the encoder and the families use
    "pass_modes": "nn.pass_modes",  # Encoder.forward's one mode per pass
    "scoring": "nn.score_rules",  # ScoreRule, PassRunner: not to be confused with tasks/score/
    # core: text -> tokens
    "tokenizer": "data.tokenizer",
    # tasks
    "score": "tasks.score",
    "score.long": "tasks.score.memory",  # Transformer-XL memory over long texts (not attention/long)
    "eval": "tasks.eval",
    "train": "tasks.train",
    "train.checkpoint": "tasks.train.checkpoint_files",  # the files of one checkpoint
    "train.checkpointing": "tasks.train.run_checkpoints",  # the run's side: which to resume, restore, save
    "finetune": "tasks.finetune",
    "finetune_convert": "tasks.finetune.convert",
    "serve": "tasks.serve",
    "distill": "tasks.distill",
    "export": "tasks.export",
    "decoding": "tasks.decoding",
    "simcse": "tasks.simcse",
    "grow": "tasks.grow",
    "report": "tasks.report",
    "viz": "tasks.viz",
    "demo": "tasks.demo",
    "lm_eval_backend": "tasks.lm_eval_backend",
    "lm_eval_tasks": "tasks.lm_eval_tasks",
}

# Shim modules whose names moved one by one (old module -> {name: new module}); _moved.py serves them and the
# files go. Only names the shims exported.
_CONVERT_NAMES = {
    "families.hf": ["ARCHITECTURES", "SEQUENCE_ARCHITECTURES", "HFCheckpoint", "from_hf", "hf_config_dict",
                    "hf_electra_config", "to_hf"],
    "families.hf.bert": ["config_from_hf_bert", "hf_bert_to_maskplay", "maskplay_to_hf_bert"],
    "families.hf.electra": ["config_from_hf_electra", "hf_electra_discriminator_to_maskplay",
                            "hf_electra_embeddings_equal", "hf_electra_generator_to_maskplay",
                            "hf_electra_pair_to_maskplay", "maskplay_to_hf_electra",
                            "maskplay_to_hf_electra_discriminator", "maskplay_to_hf_electra_generator"],
    "families.hf.gpt": ["config_from_hf_bert_lm_head", "gpt_from_hf_bert_lm_head", "gpt_to_hf_bert_lm_head",
                        "hf_bert_lm_head_config_dict", "hf_bert_lm_head_to_maskplay", "maskplay_to_hf_bert_lm_head"],
    "families.hf.sequence": ["sequence_classification_architecture"],
    "families.hf.xlnet": ["XLNET_SPECIAL_IDS", "config_from_hf_xlnet", "hf_xlnet_config_dict",
                          "hf_xlnet_to_maskplay", "maskplay_to_hf_xlnet"],
    "tasks.finetune.convert": ["finetuned_from_hf_sequence_classification",
                               "finetuned_to_hf_sequence_classification"],
}
SHIMS = ["generation", "convert", "convert_xlnet"]

# tests/<name>.py -> the folder that mirrors what it tests; not listed: stays in tests/ (the whole package, its
# scripts and benchmarks: the house rules, public API, fuzzing, reliability, GPU, shipped configs)
TEST_DIRS: dict[str, list[str]] = {
    "nn": ["test_adaptive_span", "test_arch_switches", "test_bf16_attention", "test_causal_switches",
           "test_lite_attention", "test_long_attention", "test_long_masks", "test_masks", "test_model",
           "test_positions", "test_reformer", "test_reversible", "test_sdpa_fast_path", "test_sparse_attention",
           "test_static_decode", "test_wide_linear"],
    "runtime": ["test_allocator", "test_flops", "test_precision_auto", "test_progress", "test_quant"],
    "data": ["test_prepare", "test_tokenizer", "test_tokenizer_bpe"],
    "families": ["test_electra", "test_gpt_bert", "test_gpt_bert_switches", "test_gpt_transformer_xl",
                 "test_scoring_rules", "test_toy_family", "test_unilm", "test_xlnet"],  # test_scoring_rules: item 2
    "families/hf": ["hf_masked_support", "test_convert_electra", "test_convert_gpt", "test_convert_xlnet",
                    "test_hf_causal", "test_hf_causal_tokenizers", "test_hf_directories", "test_hf_masked",
                    "test_hf_masked_switches", "test_hf_parity"],
    "tasks": ["test_generation", "test_grow", "test_lm_eval", "test_report", "test_simcse"],
    "tasks/score": ["test_embed", "test_gpt_memory_scoring", "test_long_documents", "test_score",
                    "test_score_support", "test_scorer_api", "test_xlnet_scoring"],
    "tasks/train": ["test_checkpoint", "test_fused_adamw", "test_learning", "test_memory_training",
                    "test_pinned_batches", "test_train", "test_train_compile", "test_train_ddp", "test_train_recipe",
                    "test_words_budget"],
    "tasks/eval": ["test_blimp", "test_eval", "test_eval_files", "test_seq2seq", "test_sts_baselines"],
    "tasks/finetune": ["test_finetune"],
    "tasks/export": ["test_export_electra", "test_export_hf", "test_export_lengths", "test_export_lm_eval",
                     "test_export_revisions", "test_export_st", "test_model_cards"],
    "tasks/serve": ["test_serve"],
    "tasks/distill": ["test_distill"],
    "cli": ["test_cli_masks", "test_eval_cli", "test_help_and_records", "test_score_cli"],
}

# (file after the move, text, replacement): code that finds files beside itself
FIXUPS: list[tuple[str, str, str]] = [
    ("src/maskplay/__init__.py", "(`train` and `finetune` are the names of their sub-packages here: `maskplay.tasks.train` "
     "is the module, as Python binds a\nsubmodule to its package's attribute once it is imported.)",
     "(The tasks are maskplay.tasks' sub-packages; their old paths, maskplay.train and the like, still import with a\n"
     "DeprecationWarning: maskplay._moved.)"),
    ("src/maskplay/runtime/model_dir.py", 'Path(__file__).resolve().parent / "assets"',
     'Path(__file__).resolve().parents[1] / "assets"'),
    ("src/maskplay/tasks/eval/common.py", "Path(__file__).resolve().parents[3].parent",
     "Path(__file__).resolve().parents[4].parent"),
    ("tests/runtime/test_progress.py", "src = Path(progress.__file__).parent",
     "src = Path(progress.__file__).parents[1]"),
    ("tests/runtime/test_progress.py", '("progress.py", "train/metrics.py")',
     '("runtime/progress.py", "tasks/train/metrics.py")'),
    ("tests/runtime/test_progress.py", 'assert "progress.py" in users', 'assert "runtime/progress.py" in users'),
    ("tests/runtime/test_progress.py", '(src / "train" / "metrics.py")', '(src / "tasks" / "train" / "metrics.py")'),
    ("tests/runtime/test_progress.py", "(train/metrics.py only", "(tasks/train/metrics.py only"),
]

# lines the longer names push past 125 characters, wrapped (file after the move, as rewritten, wrapped); a line
# another branch has changed is not found and stays for ruff's E501 to name
WRAPS: list[tuple[str, str, str]] = [
    ('scripts/bundle.py',
     'The model card (README.md in the asset directory) is written by hand; tests/tasks/export/test_model_cards.py checks its numbers.',
     'The model card (README.md in the asset directory) is written by hand; tests/tasks/export/test_model_cards.py checks\nits numbers.'),
    ('src/maskplay/__init__.py',
     '(maskplay.tasks.decoding), `TrainConfig` (run it with maskplay.tasks.train.train), `load_finetuned` (maskplay.tasks.finetune),\n`load_tokenizer`. The tasks are imported when first asked for, so `import maskplay` stays the core and families.',
     '(maskplay.tasks.decoding), `TrainConfig` (run it with maskplay.tasks.train.train), `load_finetuned`\n(maskplay.tasks.finetune), `load_tokenizer`. The tasks are imported when first asked for, so `import maskplay` stays\nthe core and families.'),
    ('src/maskplay/cli/finetune.py',
     '                                   "directory that `maskplay predict` and maskplay.tasks.finetune.FineTuned.from_pretrained load.")',
     '                                   "directory that `maskplay predict` and "\n                                   "maskplay.tasks.finetune.FineTuned.from_pretrained load.")'),
    ('src/maskplay/families/base.py',
     '        """A family whose step is not the one-tower formula of maskplay.runtime.flops says what it is (None: that formula)."""',
     '        """A family whose step is not the one-tower formula of maskplay.runtime.flops says what it is (None: that\n        formula)."""'),
    ('src/maskplay/nn/attention/inputs.py',
     "    BandedMask for the banded kernel (attention/long_attention.py). `dead_rows`: the queries that may attend to nothing, whose\n    output is zeroed (dense.guard_empty_rows). `kv`: an unprojected key/value stream, when the queries' stream is not",
     "    BandedMask for the banded kernel (attention/long_attention.py). `dead_rows`: the queries that may attend to nothing,\n    whose output is zeroed (dense.guard_empty_rows). `kv`: an unprojected key/value stream, when the queries' stream is not"),
    ('src/maskplay/nn/backbone.py',
     '        """[model.long]: the window ANDed into the mask, or a BandedMask for a long full pass (attention/long_attention.py)."""',
     '        """[model.long]: the window ANDed into the mask, or a BandedMask for a long full pass\n        (attention/long_attention.py)."""'),
    ('src/maskplay/tasks/train/update.py',
     '"""One plain optimizer update, the core the fine-tuning loop (maskplay.tasks.finetune.loop) and SimCSE (maskplay.tasks.simcse)\nshare with each other: the step\'s rate set on every parameter group, the gradients zeroed, the loss\'s backward,\nthe gradient norm clipped, the update. Their optimizer and schedule are the pretraining loop\'s too',
     '"""One plain optimizer update, the core the fine-tuning loop (maskplay.tasks.finetune.loop) and SimCSE\n(maskplay.tasks.simcse) share with each other: the step\'s rate set on every parameter group, the gradients zeroed, the\nloss\'s backward, the gradient norm clipped, the update. Their optimizer and schedule are the pretraining loop\'s too'),
    ('tests/test_deprecated_imports.py',
     '                            ("forward_cached", "maskplay.nn.generation_hooks"), ("can_generate", "maskplay.nn.generation_hooks")],',
     '                            ("forward_cached", "maskplay.nn.generation_hooks"),\n                            ("can_generate", "maskplay.nn.generation_hooks")],'),
]

NEW_PACKAGES = {
    "nn": '"""The core\'s network: the backbone every family shares and its pieces (attention, masks, positions,\n'
          'norms, feed-forward layers, heads), the model base, the key/value cache and the generation hooks\n'
          '(ARCHITECTURE.md)."""\n',
    "runtime": '"""The core\'s running of a model: precision, devices, quantisation, model directories and files,\n'
               'progress, FLOP counts, the allocator (ARCHITECTURE.md)."""\n',
    "tasks": '"""The tasks, above the families: scoring, evaluation, training, fine-tuning, decoding, serving,\n'
             'distillation, export, and the one-module tasks (ARCHITECTURE.md). Each imports the core and the\n'
             'families, never the command line."""\n',
}

LAYERS = [
    "cli : __main__",
    "tasks",
    "families",
    "nn : runtime : data : config : registry : _moved",
]

TEXT_SUFFIXES = {".py", ".md", ".toml", ".cfg", ".txt", ".sh", ".yaml", ".yml", ".json", ".ini", ""}
SKIP_PARTS = {"results", ".git", "runs", "assets", ".ci"}
SKIP_FILES = {"scripts/relayout.py", "src/maskplay/_moved.py", "tests/test_moved.py"}


def sh(*args: str) -> str:
    return subprocess.run(args, cwd=ROOT, check=True, capture_output=True, text=True).stdout


def mapped(module: str) -> str:
    """The new dotted name (below maskplay) of `module`, by its longest moved prefix; itself when nothing moved."""
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        head = ".".join(parts[:i])
        if head in MOVES:
            return ".".join([MOVES[head], *parts[i:]])
    return module


def module_of(path: Path) -> str:
    """src/maskplay/a/b.py -> 'a.b'; src/maskplay/a/__init__.py -> 'a'; a data file -> its dotted folder + name."""
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def new_path(path: Path) -> Path:
    rel = path.relative_to(SRC)
    if path.suffix != ".py":  # a data file moves with its package: map its folder
        folder = mapped(".".join(rel.parent.parts)) if rel.parent.parts else ""
        return SRC / Path(*folder.split(".")) / rel.name if folder else path
    new = mapped(module_of(path))
    if rel.name == "__init__.py":
        return SRC / Path(*new.split(".")) / "__init__.py"
    return SRC / Path(*new.split(".")).with_suffix(".py")


def test_moves() -> dict[Path, Path]:
    out = {}
    for folder, names in TEST_DIRS.items():
        for name in names:
            out[Path("tests") / f"{name}.py"] = Path("tests") / folder / f"{name}.py"
    return out


def plan() -> tuple[dict[Path, Path], bool]:
    """Every tracked file to move (old -> new) and whether the layout is already applied."""
    files = [Path(p) for p in sh("git", "ls-files", str(SRC)).split()]
    moves = {p: new_path(p) for p in files if new_path(p) != p}
    for old, new in test_moves().items():
        if (ROOT / old).exists():
            moves[old] = new
    done = not moves and (ROOT / SRC / "nn").is_dir()
    for new in moves.values():
        if (ROOT / new).exists():
            raise SystemExit(f"relayout: {new} exists already and would be overwritten; a half-applied layout?")
    return moves, done


# ---- rewriting -----------------------------------------------------------------------------------------------

def _resolve(package: str, level: int, module: str | None) -> str:
    """`from ...module` inside `package` (dotted, below maskplay; '' = maskplay) -> dotted below maskplay."""
    parts = package.split(".") if package else []
    base = parts[: len(parts) - (level - 1)] if level > 1 else parts
    return ".".join([*base, *(module.split(".") if module else [])])


def _relative(package: str, target: str) -> str:
    """`target` (dotted, below maskplay) written relative to `package`: the dots and the rest."""
    p = package.split(".") if package else []
    t = target.split(".") if target else []
    common = 0
    while common < min(len(p), len(t)) and p[common] == t[common]:
        common += 1
    return "." * (len(p) - common + 1) + ".".join(t[common:])


def _is_module(dotted: str, modules: set[str]) -> bool:
    return dotted in modules


def rewrite_imports(text: str, old_package: str | None, new_package: str | None, modules: set[str]) -> str:
    """Rewrite the `from X import a, b` statements whose module or names moved. `old_package` / `new_package`: the
    file's package before and after the move (dotted below maskplay), None outside maskplay (relative imports are
    left alone there). `modules`: every old module name (below maskplay), to tell a submodule from a name."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    edits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            if old_package is None:
                continue
            target = _resolve(old_package, node.level, node.module)
        elif node.module == PKG or (node.module or "").startswith(PKG + "."):
            target = node.module[len(PKG) + 1:]
        else:
            continue
        groups: dict[str, list[str]] = {}
        for alias in node.names:
            full = f"{target}.{alias.name}" if target else alias.name
            if alias.name != "*" and _is_module(full, modules) and mapped(full) != full:
                new = mapped(full)
                parent, _, name = new.rpartition(".")
                entry = name if name == alias.name and not alias.asname else f"{name} as {alias.asname or alias.name}"
            else:
                parent = mapped(target)
                entry = alias.name + (f" as {alias.asname}" if alias.asname else "")
            groups.setdefault(parent, []).append(entry)
        statements = []
        for parent, names in groups.items():
            if node.level:
                where = _relative(new_package, parent)
            else:
                where = f"{PKG}.{parent}" if parent else PKG
            statements.append(f"from {where} import {', '.join(names)}")
        original = ast.get_source_segment(text, node)
        if len(statements) == 1 and node.level == 0 and groups.keys() == {target} :
            continue  # nothing moved
        indent = re.match(r"\s*", lines[node.lineno - 1]).group(0)
        new_text = f"\n{indent}".join(statements)
        if "\n" not in original and len(indent) + len(new_text) > 120 and len(statements) == 1:
            head, _, names = new_text.partition(" import ")
            new_text = f"{head} import ({names})"
        edits.append((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, original, new_text))
    if not edits:
        return text
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line.encode()))
    data = text.encode()
    for lineno, col, end_lineno, end_col, original, new_text in sorted(edits, reverse=True):
        start = offsets[lineno - 1] + col
        end = offsets[end_lineno - 1] + end_col
        if new_text == original:
            continue
        data = data[:start] + new_text.encode() + data[end:]
    return data.decode()


def dotted_pattern() -> re.Pattern[str]:
    keys = sorted({*MOVES, *SHIMS_NOT_IN_TABLE}, key=len, reverse=True)
    return re.compile(r"(?<![\w.])" + re.escape(PKG) + r"\.(" + "|".join(re.escape(k) for k in keys) + r")(?![\w])")


SHIMS_NOT_IN_TABLE: list[str] = []  # old shim names stay as they are (served by _moved.py)


def rewrite_dotted(text: str) -> str:
    text = dotted_pattern().sub(lambda m: f"{PKG}.{mapped(m.group(1))}", text)
    # tests import helpers from each other as tests.test_x (and patch them by that name)
    tests = {old.stem: ".".join(new.with_suffix("").parts) for old, new in test_moves().items()}
    pattern = re.compile(r"(?<![\w.])tests\.(" + "|".join(map(re.escape, tests)) + r")(?![\w])")
    return pattern.sub(lambda m: tests[m.group(1)], text)


def path_table(moves: dict[Path, Path]) -> list[tuple[str, str]]:
    """Textual path prefixes old -> new: files, and packages' folders (with a trailing slash)."""
    table = {}
    for old, new in moves.items():
        table[old.as_posix()] = new.as_posix()
    for old, new in MOVES.items():
        o, n = old.replace(".", "/"), new.replace(".", "/")
        if (ROOT / SRC / n).is_dir() or (ROOT / SRC / o).is_dir():  # a folder, with or without its slash
            table[f"{SRC.as_posix()}/{o}"] = f"{SRC.as_posix()}/{n}"
    # `maskplay/x.py` without src/ as well
    for old, new in list(table.items()):
        if old.startswith("src/"):
            table[old[4:]] = new[4:]
    return sorted(table.items(), key=lambda kv: len(kv[0]), reverse=True)


def rewrite_paths(text: str, table: list[tuple[str, str]]) -> str:
    if not table:
        return text
    pattern = re.compile(r"(?<![\w/.])(" + "|".join(re.escape(old) for old, _ in table) + r")(?![\w])")
    lookup = dict(table)
    return pattern.sub(lambda m: lookup[m.group(1)], text)


def renamed() -> list[tuple[str, str]]:
    """The modules whose file name changed (not only their folder): (old dotted, new dotted)."""
    return [(old, new) for old, new in MOVES.items() if old.rpartition(".")[2] != new.rpartition(".")[2]]


def rewrite_renamed(text: str, new_package: str | None) -> str:
    """Short mentions of a renamed module: `attention/long.py` anywhere; a bare `long.py` in its own package's
    files (comments and docstrings say `checkpointing.py` beside it)."""
    for old, new in renamed():
        old_short = "/".join(old.split(".")[-2:]) + ".py"
        # a top-level module that changed its name: its whole new path (a bare `convert.py` would say less)
        new_short = old_short.rpartition("/")[0] + "/" + new.rpartition(".")[2] + ".py" if "/" in old_short \
            else new.replace(".", "/") + ".py"
        text = re.sub(r"(?<![\w/.])" + re.escape(old_short), new_short, text)
        if new_package == new.rpartition(".")[0]:
            bare = old.rpartition(".")[2] + ".py"
            text = re.sub(r"(?<![\w/.])" + re.escape(bare), new.rpartition(".")[2] + ".py", text)
    return text


def fix_parents(text: str, depth: int) -> str:
    """A moved test's Path(__file__) ... parents[1] / .parent.parent (the repository) -> parents[depth]."""
    text = re.sub(r"(Path\(__file__\)(?:\.resolve\(\))?)\.parents\[1\]", rf"\1.parents[{depth}]", text)
    return re.sub(r"(Path\(__file__\)(?:\.resolve\(\))?)\.parent\.parent(?![\w.])", rf"\1.parents[{depth}]", text)


def rewrite_layers(text: str) -> str:
    body = "\n".join(f'    "{layer}",' for layer in LAYERS)
    text = re.sub(r"layers = \[\n(?:    .*\n)+?\]", f"layers = [\n{body}\n]", text, count=1)
    def package_data(m: re.Match[str]) -> str:
        items = []
        for item in re.findall(r'"([^"]+)"', m.group(1)):
            folder = item.split("/")[0]
            new = mapped(folder).replace(".", "/")
            items.append(f'"{new}{item[len(folder):]}"')
        return f"{PKG} = [{', '.join(items)}]"
    return re.sub(rf"^{PKG} = \[(.*)\]$", package_data, text, count=1, flags=re.M)


# ---- the files the layout adds -------------------------------------------------------------------------------

MOVED_PY = '''"""Old import paths of modules that moved (issue 41: the layers as sub-packages), served by one import hook
instead of a shim file per module. `import maskplay.backbone` still works and warns (DeprecationWarning) with the new
path; it gives the same module object as `import maskplay.nn.backbone` (a package's submodules too:
maskplay.train.loop is maskplay.tasks.train.loop). Modules whose names moved to several places (maskplay.generation,
maskplay.convert, maskplay.convert_xlnet) are served name by name, each warning with its own new module.
Generated by scripts/relayout.py; drop an entry when its deprecation period ends."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any

# old module -> new module (below maskplay; a package's submodules follow it)
MODULES: dict[str, str] = {
%(modules)s
}

# old module -> {name: its new module}
NAMES: dict[str, dict[str, str]] = {
%(names)s
}


def _new_name(fullname: str) -> str | None:
    """maskplay.<old>[.rest] -> maskplay.<new>[.rest], or None when nothing moved there."""
    if not fullname.startswith("maskplay."):
        return None
    parts = fullname.split(".")[1:]
    for i in range(len(parts), 0, -1):
        head = ".".join(parts[:i])
        if head in MODULES:
            return ".".join(["maskplay", MODULES[head], *parts[i:]])
    return None


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module at its new one, the same object, with a warning."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: Any) -> ModuleType:
        warnings.warn(f"{spec.name} is deprecated: import {self.new}", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(self.new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._spec  # the import machinery set the old name's spec on it; keep the real one

    def get_code(self, fullname: str) -> Any:
        """`python -m maskplay.<old>` (runpy asks for the code, not the module): the new module's code."""
        warnings.warn(f"{fullname} is deprecated: run {self.new}", DeprecationWarning, stacklevel=2)
        # run the new module as __main__ in its own package (its relative imports resolve there, not here)
        return compile(f"import runpy; runpy.run_module({self.new!r}, run_name='__main__', alter_sys=True)",
                       f"<{fullname}: {self.new}>", "exec")


class _Names(importlib.abc.Loader):
    """Loads a module whose names moved one by one: each name warns and comes from its new module."""

    def create_module(self, spec: Any) -> ModuleType:
        return ModuleType(spec.name)

    def exec_module(self, module: ModuleType) -> None:
        old = module.__name__
        table = {name: f"maskplay.{new}" for name, new in NAMES[old[len("maskplay."):]].items()}

        def __getattr__(name: str) -> Any:
            if name not in table:
                raise AttributeError(f"module {old!r} has no attribute {name!r}")
            warnings.warn(f"{old} is deprecated: import {name} from {table[name]}", DeprecationWarning, stacklevel=2)
            return getattr(importlib.import_module(table[name]), name)

        module.__doc__ = f"Deprecated: its names moved (maskplay._moved.NAMES[{old[9:]!r}])."
        module.MOVED = table
        module.__getattr__ = __getattr__


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.startswith("maskplay.") and fullname[len("maskplay."):] in NAMES:
            return importlib.util.spec_from_loader(fullname, _Names())
        new = _new_name(fullname)
        if new is None or importlib.util.find_spec(new) is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(new))


def install() -> None:
    """Put the finder first on sys.meta_path (before the path finder would load a second copy from the new
    package's folder under the old name); once."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


install()
'''


MOVED_TEST = '''"""maskplay._moved: an old import path warns (DeprecationWarning) naming the new one and gives the same
module object; a package's submodules follow it; a module whose names moved one by one serves each name from its new
module; a path that never existed is still a ModuleNotFoundError."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

from maskplay._moved import MODULES, NAMES


def _fresh(name: str) -> None:
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]


@pytest.mark.parametrize("old", sorted(MODULES))
def test_an_old_module_path_warns_and_is_the_same_module(old):
    new = importlib.import_module(f"maskplay.{MODULES[old]}")
    _fresh(f"maskplay.{old}")
    with pytest.warns(DeprecationWarning, match=rf"maskplay\\.{old} is deprecated: import maskplay\\.{MODULES[old]}$"):
        module = importlib.import_module(f"maskplay.{old}")
    assert module is new
    assert module.__spec__.name == new.__name__  # the real module keeps its own spec


def test_a_submodule_of_an_old_package_is_the_new_submodule():
    from maskplay.tasks.train import loop

    _fresh("maskplay.train")
    with pytest.warns(DeprecationWarning, match="import maskplay.tasks.train.loop$"):
        import maskplay.train.loop as old
    assert old is loop


def test_from_import_of_an_old_module_gives_its_names():
    from maskplay.nn.masks import causal

    _fresh("maskplay.masks")
    with pytest.warns(DeprecationWarning, match="maskplay.masks is deprecated"):
        from maskplay.masks import causal as old
    assert old is causal


def test_the_new_paths_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        importlib.import_module("maskplay.nn.backbone")
        importlib.import_module("maskplay.tasks.score")


@pytest.mark.parametrize("name", ["maskplay.no_such_module", "maskplay.train.no_such_module", "maskplay.nn.backbone2"])
def test_an_unknown_path_is_still_not_found(name):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(name)


def test_every_name_of_a_name_by_name_module_resolves():
    for old, names in NAMES.items():
        module = importlib.import_module(f"maskplay.{old}")
        for name, new in names.items():
            with pytest.warns(DeprecationWarning, match=f"maskplay.{old} is deprecated: import {name} from maskplay.{new}$"):
                value = getattr(module, name)
            assert value is getattr(importlib.import_module(f"maskplay.{new}"), name)
'''


def _exists(dotted: str) -> bool:
    path = ROOT / SRC / Path(*dotted.split("."))
    return path.is_dir() or path.with_suffix(".py").exists()


def moved_py() -> str:
    # only what moved on this checkout (an entry for a module it never had would be an import error, not a warning)
    modules = "\n".join(f'    "{old}": "{new}",' for old, new in MOVES.items() if _exists(new))
    names = []
    generation = {**{n: "tasks.decoding" for n in _decoding_names()},
                  **{n: "nn.generation_hooks" for n in _hook_names()}}
    convert = {n: module for module, ns in _CONVERT_NAMES.items() for n in ns}
    xlnet = dict.fromkeys(_CONVERT_NAMES["families.hf.xlnet"], "families.hf.xlnet")
    for old, table in (("generation", generation), ("convert", convert), ("convert_xlnet", xlnet)):
        names.append(f'    "{old}": {{')
        names.extend(f'        "{n}": "{m}",' for n, m in table.items())
        names.append("    },")
    return MOVED_PY % {"modules": modules, "names": "\n".join(names)}


def _generation_table() -> dict[str, list[str]]:
    """The names maskplay.generation's shim forwarded, read from its _HOOKS / _DECODING tuples (before it goes)."""
    file = ROOT / SRC / "generation.py"
    text = file.read_text() if file.exists() else ""
    out: dict[str, list[str]] = {}
    for key, name in (("_HOOKS", "generation_hooks"), ("_DECODING", "decoding")):
        m = re.search(rf"^{key} = \((.*?)\)$", text, re.S | re.M)
        out[name] = re.findall(r'"(\w+)"', m.group(1)) if m else []
    return out


def _decoding_names() -> list[str]:
    return _GENERATION.get("decoding", [])


def _hook_names() -> list[str]:
    return _GENERATION.get("generation_hooks", [])


_GENERATION: dict[str, list[str]] = {}


# ---- main ----------------------------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--allow-dirty", action="store_true", help="run on a work tree with uncommitted changes")
    args = parser.parse_args()
    if not args.allow_dirty and sh("git", "status", "--porcelain", "--untracked-files=no").strip():
        raise SystemExit("relayout: the work tree has uncommitted changes; commit or stash them first")
    moves, done = plan()
    if done:
        print("relayout: already applied (src/maskplay/nn exists and nothing is left to move); nothing done")
        return 0
    for old, new in sorted(moves.items()):
        print(f"move {old} -> {new}")
    _warn_unplaced()
    if args.dry_run:
        return 0
    _GENERATION.update(_generation_table())
    if not _GENERATION.get("decoding"):
        raise SystemExit("relayout: src/maskplay/generation.py's MOVED table not found; cannot write _moved.NAMES")
    modules = {module_of(p) for p in moves if p.suffix == ".py" and p.parts[0] == "src"}
    modules |= {module_of(Path(p)) for p in sh("git", "ls-files", str(SRC)).split() if p.endswith(".py")}
    old_package = {}  # new path -> the file's package before the move
    for path in [Path(p) for p in sh("git", "ls-files", str(SRC)).split() if p.endswith(".py")]:
        mod = module_of(path)
        old_package[moves.get(path, path)] = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    for old, new in moves.items():
        (ROOT / new).parent.mkdir(parents=True, exist_ok=True)
        sh("git", "mv", str(old), str(new))
    _remove_empty_folders()
    for shim in SHIMS:
        if (ROOT / SRC / f"{shim}.py").exists():
            sh("git", "rm", "-q", str(SRC / f"{shim}.py"))
            print(f"remove {SRC / shim}.py (its names: maskplay._moved.NAMES)")
    for name, doc in NEW_PACKAGES.items():
        init = ROOT / SRC / name / "__init__.py"
        if not init.exists():
            init.write_text(doc)
            print(f"write {init.relative_to(ROOT)}")
    (ROOT / SRC / "_moved.py").write_text(moved_py())
    print(f"write {SRC}/_moved.py")
    (ROOT / "tests" / "test_moved.py").write_text(MOVED_TEST)
    print("write tests/test_moved.py")
    _install_hook()
    table = path_table(moves)
    tests_moved = set(moves.values())
    changed = 0
    for rel in sh("git", "ls-files").split() + ["src/maskplay/_moved.py"]:
        path = Path(rel)
        if rel in SKIP_FILES or SKIP_PARTS & set(path.parts) or path.suffix not in TEXT_SUFFIXES:
            continue
        if path.parts[:3] == ("src", PKG, "export") or path.parts[:4] == ("src", PKG, "tasks", "export"):
            if "hf_code" in path.parts:
                continue  # standalone custom code (imports torch and transformers only)
        file = ROOT / path
        if not file.is_file():
            continue
        try:
            text = file.read_text()
        except UnicodeDecodeError:
            continue
        new = text
        if path.suffix == ".py":
            inside = path.parts[:2] == ("src", PKG)
            package = old_package.get(path) if inside else None
            new_package = module_of(path) if path.name == "__init__.py" else module_of(path).rpartition(".")[0] \
                if inside else None
            try:
                new = rewrite_imports(new, package, new_package, modules)
            except SyntaxError:
                print(f"skip {rel}: not parseable")
        new = rewrite_dotted(new)
        new = rewrite_paths(new, table)
        new = rewrite_renamed(new, new_package if path.suffix == ".py" else None)
        if path in tests_moved and path.parts[0] == "tests":
            new = fix_parents(new, len(path.parts) - 1)
        if rel == "pyproject.toml":
            new = rewrite_layers(new)
        if new != text:
            file.write_text(new)
            changed += 1
    for where, old, repl in FIXUPS + WRAPS:
        file = ROOT / where
        if file.exists() and old in file.read_text():
            file.write_text(file.read_text().replace(old, repl))
            print(f"fix {where}: {old!r} -> {repl!r}")
    ruff = Path(sys.executable).parent / "ruff"
    if ruff.exists():  # the moved names sort differently
        subprocess.run([str(ruff), "check", "-q", "--fix", "--select", "I", "src", "tests", "benchmarks", "scripts"],
                       cwd=ROOT, check=False)
        print("ruff: imports sorted")
    else:
        print("relayout: no ruff beside this python; run `ruff check --fix --select I src tests benchmarks scripts`")
    sh("git", "add", "-A", "src", "tests")
    if ruff.exists():  # a longer dotted name can push prose past the line limit: wrap those by hand
        subprocess.run([str(ruff), "check", "--select", "E501", "--output-format", "concise", "src", "tests",
                        "benchmarks", "scripts"], cwd=ROOT, check=False)
    print(f"relayout: {len(moves)} files moved, {changed} files rewritten; check with ruff, lint-imports, "
          "pytest --collect-only and tests/test_house.py")
    return 0


# what stays at the package's top level; anything else there that MOVES does not place is reported
TOP_LEVEL = {"__init__", "__main__", "_moved", "config", "registry", "cli", "families", "data", "nn", "runtime", "tasks",
             "assets", *SHIMS}


def _warn_unplaced() -> None:
    """A module added to the top level since this script was written (lint-imports' exhaustive contract would
    reject it too): say so, so that it gets a line in MOVES."""
    for entry in sorted((ROOT / SRC).iterdir()):
        name = entry.stem if entry.suffix == ".py" else entry.name
        if name in TOP_LEVEL or name in MOVES or name.startswith(".") or name == "__pycache__":
            continue
        if entry.suffix == ".py" or (entry / "__init__.py").exists():
            print(f"relayout: WARNING: {entry.relative_to(ROOT)} is not placed in a layer; add it to MOVES and re-run")


def _remove_empty_folders() -> None:
    """The moved packages' old folders, left holding only __pycache__ (which would make them namespace packages)."""
    import shutil

    for folder in sorted((ROOT / SRC).rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if not folder.is_dir() or folder.name == "__pycache__":
            continue
        rest = [p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        if not rest:
            shutil.rmtree(folder)
            print(f"remove the empty folder {folder.relative_to(ROOT)}")


def _install_hook() -> None:
    """maskplay/__init__.py installs the finder first thing."""
    init = ROOT / SRC / "__init__.py"
    text = init.read_text()
    if "_moved" in text:
        return
    marker = "from __future__ import annotations\n"
    head, _, tail = text.partition(marker)
    hook = "\nfrom . import _moved  # noqa: F401  (its import hook: the modules' old paths still import, with a warning)"
    init.write_text(head + marker + hook + tail)
    print(f"edit {SRC}/__init__.py: install maskplay._moved's finder")


if __name__ == "__main__":
    sys.exit(main())
