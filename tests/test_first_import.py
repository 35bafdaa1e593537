"""Any module of the package can be the first one a process imports. The families load on first use (so that
`maskplay --help` imports no torch), and a module-level __getattr__ that loads them must not answer the import
system's own probes: `from maskplay.config import X` asks the module for `__path__`, and loading the families from
there, half-way through importing a core module they import, is a circular import."""

from __future__ import annotations

import subprocess
import sys

import pytest

FIRST_IMPORTS = ["maskplay.runtime.model_dir", "maskplay.tasks.export", "maskplay.config", "maskplay.nn.modeling",
                 "maskplay.tasks.score", "maskplay.families.hf", "maskplay.tasks.distill"]


@pytest.mark.parametrize("module", FIRST_IMPORTS)
def test_a_module_imported_first_in_a_fresh_process(module: str) -> None:
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_import_systems_probes_load_no_family() -> None:
    code = ("import sys, maskplay.config as c\n"
            "assert not hasattr(c, '__path__')\n"
            "assert not any(m.startswith('maskplay.families') for m in sys.modules), 'families loaded'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
