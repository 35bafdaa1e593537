"""The package's front door: `maskplay` names every registered family class and the main entry points, each the
same object as at its home module, and `import maskplay` alone imports no task (they load when first asked for)."""

from __future__ import annotations

import subprocess
import sys

import maskplay
from maskplay.registry import registered


def test_every_family_class_is_exported():
    families = registered()  # the built-in seven are imported on this first lookup (import maskplay imports none)
    assert len(families) >= 7
    for name, cls in families.items():
        if cls.__module__.startswith("maskplay.families."):  # the built-in seven, not families a test registered
            assert getattr(maskplay, cls.__name__) is cls, name
            assert cls.__name__ in maskplay.__all__, name


def test_entry_points_are_the_home_modules_objects():
    from maskplay.tasks.decoding import generate
    from maskplay.tasks.finetune import load_finetuned
    from maskplay.tasks.score import Embedder, Scorer
    from maskplay.tasks.train import TrainConfig

    for obj in (generate, load_finetuned, Embedder, Scorer, TrainConfig):
        assert getattr(maskplay, obj.__name__) is obj
        assert obj.__name__ in maskplay.__all__ and obj.__name__ in dir(maskplay)
    assert all(hasattr(maskplay, name) for name in maskplay.__all__)


def test_importing_the_package_imports_no_task_and_no_torch():
    code = "import sys, maskplay; assert 'torch' not in sys.modules; maskplay.TTA; assert 'torch' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_importing_the_package_imports_no_task():
    code = ("import sys, maskplay; print(sorted(m for m in sys.modules if m.split('.')[1:2] and m.split('.')[1] in "
            "('score', 'train', 'decoding', 'finetune', 'simcse', 'eval', 'serve') and m.startswith('maskplay.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
