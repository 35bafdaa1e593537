"""A command line that starts fast without saying less: `import maskplay.cli`, `maskplay --version` and `--help`
import no torch; the parser `maskplay` runs (each command's options built only when that command runs) prints
the same help as the whole parser, command by command; the summaries' written-out family facts are the families';
a model skeleton built without random initialisation has the same tensors; what --precision auto chose is said
once, when measured, and again with -v."""

from __future__ import annotations

import argparse
import contextlib
import io
import subprocess
import sys

import pytest
import torch

import maskplay.runtime.precision_probe as pp
from maskplay.cli import COMMANDS, NAMES, build_parser, main
from maskplay.cli.summaries import BUILT_IN, live_facts

NO_TORCH = "\n".join([
    "import sys, runpy",
    "sys.argv = ['maskplay', {arg!r}]",
    "try:",
    "    runpy.run_module('maskplay', run_name='__main__')",
    "except SystemExit:",
    "    pass",
    "assert 'torch' not in sys.modules, 'torch imported'",
    "assert not [m for m in sys.modules if m.startswith('maskplay.tasks')], 'a task imported'",
])


@pytest.mark.parametrize("arg", ["--version", "--help"])
def test_version_and_help_import_no_torch(arg):
    done = subprocess.run([sys.executable, "-c", NO_TORCH.format(arg=arg)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert ("maskplay 0." if arg == "--version" else "usage: maskplay") in done.stdout


def test_importing_the_command_line_imports_no_torch():
    code = "import sys, maskplay.cli, maskplay.config; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def _printed(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main(argv)
    return out.getvalue()


def test_the_lazy_parser_prints_the_whole_parsers_help():
    whole = build_parser()
    assert _printed(["--help"]) == whole.format_help()
    subparsers = next(a for a in whole._actions if isinstance(a, argparse._SubParsersAction))
    names = [NAMES.get(module, module) for module in COMMANDS]
    assert list(subparsers.choices) == names
    for name in names:
        if name == "lm-eval":  # every argument, --help included, goes to lm-eval
            continue
        assert _printed([name, "--help"]) == subparsers.choices[name].format_help(), name


def test_written_out_family_facts_are_the_families():
    live = live_facts()
    built_in = set(BUILT_IN.names)
    assert tuple(n for n in live.names if n in built_in) == BUILT_IN.names
    assert tuple(p for p in live.own_scores if p[0] in built_in) == BUILT_IN.own_scores
    assert tuple(n for n in live.converted if n in built_in) == BUILT_IN.converted
    assert tuple(n for n in live.generating if n in built_in) == BUILT_IN.generating


@pytest.mark.parametrize("family", ["tta", "gpt", "xlnet", "electra", "gpt-bert"])
def test_a_skeleton_without_random_init_has_the_models_tensors(family):
    from maskplay.config import preset
    from maskplay.families import family_class
    from maskplay.families.base import _NoRandomInitOnMeta

    config = preset("tiny", family=family)
    with torch.device("meta"), _NoRandomInitOnMeta():
        skeleton = family_class(family)(config)
    real = family_class(family)(config)
    assert {k: (tuple(v.shape), v.dtype) for k, v in skeleton.state_dict().items()} == \
        {k: (tuple(v.shape), v.dtype) for k, v in real.state_dict().items()}
    assert all(v.is_meta for v in skeleton.state_dict().values())


def test_precision_auto_is_said_when_measured_and_with_verbose(tmp_path, monkeypatch, capsys):
    from tests.tasks.score.test_score_support import save_model_dir, small_tokenizer, tiny

    monkeypatch.setenv(pp.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(pp.REPROBE_ENV, raising=False)
    monkeypatch.delenv(pp.AUTO_ENV, raising=False)
    monkeypatch.setattr(pp, "time_matmul", lambda m, k, n, dtype, budget=0.05, give_up=float("inf"): float(m))
    tok = small_tokenizer(tmp_path)
    model_dir = str(save_model_dir(tmp_path / "tta", tiny("tta", tok), tok))
    said = "maskplay score: precision auto -> fp32"

    assert main(["score", model_dir, "the cat sat", "--format", "tsv"]) == 0
    first = capsys.readouterr()
    assert said in first.err and "measured now" in first.err  # the first run on this machine measures: said
    assert main(["score", model_dir, "the cat sat", "--format", "tsv"]) == 0
    again = capsys.readouterr()
    assert "precision" not in again.err and again.out == first.out  # cached: the same output, nothing said
    assert main(["-v", "score", model_dir, "the cat sat", "--format", "tsv"]) == 0
    verbose = capsys.readouterr().err
    assert said in verbose and "measured earlier, cached" in verbose
    monkeypatch.setenv(pp.REPROBE_ENV, "1")
    assert main(["score", model_dir, "the cat sat", "--format", "tsv"]) == 0
    assert "measured now" in capsys.readouterr().err
