"""Old import paths of modules that moved (when the layers became sub-packages), served by one import hook
instead of a shim file per module. `import maskplay.backbone` still works and warns (DeprecationWarning) with the new
path; it gives the same module object as `import maskplay.nn.backbone` (a package's submodules too:
maskplay.train.loop is maskplay.tasks.train.loop). Modules whose names moved to several places (maskplay.generation,
maskplay.convert, maskplay.convert_xlnet) are served name by name, each warning with its own new module.
Written by scripts/relayout.py (commit 5d3ef47); drop an entry when its deprecation period ends."""

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
    "backbone": "nn.backbone",
    "attention": "nn.attention",
    "attention.long": "nn.attention.long_attention",
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
    "precision": "runtime.precision",
    "precision_probe": "runtime.precision_probe",
    "devices": "runtime.devices",
    "files": "runtime.files",
    "model_dir": "runtime.model_dir",
    "allocator": "runtime.allocator",
    "progress": "runtime.progress",
    "quant": "runtime.quant",
    "flops": "runtime.flops",
    "pass_modes": "nn.pass_modes",
    "scoring": "nn.score_rules",
    "tokenizer": "data.tokenizer",
    "score": "tasks.score",
    "score.long": "tasks.score.memory",
    "eval": "tasks.eval",
    "train": "tasks.train",
    "train.checkpoint": "tasks.train.checkpoint_files",
    "train.checkpointing": "tasks.train.run_checkpoints",
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

# old module -> {name: its new module}
NAMES: dict[str, dict[str, str]] = {
    "generation": {
        "STRATEGIES": "tasks.decoding",
        "TokenCallback": "tasks.decoding",
        "GenerationConfig": "tasks.decoding",
        "Generated": "tasks.decoding",
        "GenerationOutput": "tasks.decoding",
        "filter_logits": "tasks.decoding",
        "default_stop_ids": "tasks.decoding",
        "generate": "tasks.decoding",
        "Generative": "nn.generation_hooks",
        "can_generate": "nn.generation_hooks",
        "generating_families": "nn.generation_hooks",
        "require_generative": "nn.generation_hooks",
        "embed_at": "nn.generation_hooks",
        "forward_cached": "nn.generation_hooks",
        "last_real": "nn.generation_hooks",
        "check_ids": "nn.generation_hooks",
    },
    "convert": {
        "ARCHITECTURES": "families.hf",
        "SEQUENCE_ARCHITECTURES": "families.hf",
        "HFCheckpoint": "families.hf",
        "from_hf": "families.hf",
        "hf_config_dict": "families.hf",
        "hf_electra_config": "families.hf",
        "to_hf": "families.hf",
        "config_from_hf_bert": "families.hf.bert",
        "hf_bert_to_maskplay": "families.hf.bert",
        "maskplay_to_hf_bert": "families.hf.bert",
        "config_from_hf_electra": "families.hf.electra",
        "hf_electra_discriminator_to_maskplay": "families.hf.electra",
        "hf_electra_embeddings_equal": "families.hf.electra",
        "hf_electra_generator_to_maskplay": "families.hf.electra",
        "hf_electra_pair_to_maskplay": "families.hf.electra",
        "maskplay_to_hf_electra": "families.hf.electra",
        "maskplay_to_hf_electra_discriminator": "families.hf.electra",
        "maskplay_to_hf_electra_generator": "families.hf.electra",
        "config_from_hf_bert_lm_head": "families.hf.gpt",
        "gpt_from_hf_bert_lm_head": "families.hf.gpt",
        "gpt_to_hf_bert_lm_head": "families.hf.gpt",
        "hf_bert_lm_head_config_dict": "families.hf.gpt",
        "hf_bert_lm_head_to_maskplay": "families.hf.gpt",
        "maskplay_to_hf_bert_lm_head": "families.hf.gpt",
        "sequence_classification_architecture": "families.hf.sequence",
        "XLNET_SPECIAL_IDS": "families.hf.xlnet",
        "config_from_hf_xlnet": "families.hf.xlnet",
        "hf_xlnet_config_dict": "families.hf.xlnet",
        "hf_xlnet_to_maskplay": "families.hf.xlnet",
        "maskplay_to_hf_xlnet": "families.hf.xlnet",
        "finetuned_from_hf_sequence_classification": "tasks.finetune.convert",
        "finetuned_to_hf_sequence_classification": "tasks.finetune.convert",
    },
    "convert_xlnet": {
        "XLNET_SPECIAL_IDS": "families.hf.xlnet",
        "config_from_hf_xlnet": "families.hf.xlnet",
        "hf_xlnet_config_dict": "families.hf.xlnet",
        "hf_xlnet_to_maskplay": "families.hf.xlnet",
        "maskplay_to_hf_xlnet": "families.hf.xlnet",
    },
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
