"""What the checks on a HuggingFace directory cost at load time: MaskplayModel.from_pretrained of a BERT-base-sized
BertForMaskedLM directory (random weights, 110 M parameters, written with transformers' save_pretrained, sharded
as the hub shards it, or in one model.safetensors when it fits --shard), with the checks (config.json read with a
size cap and checked field by field: families/hf/validate.py; the sharded index's names followed without leaving
the directory: runtime.files.file_inside; each file read by its fixed name not a symbolic link out of the
directory: runtime.files.model_file; the sizes checked against the weights on a model built on the meta device:
families/hf/common.check_hf_sizes) and with them replaced by what ran before (json.loads of the whole file, no
field checks, plain paths, the widths against the largest dimension only), rounds interleaved; the median of each,
and the checks alone timed apart.

    python benchmarks/hf_load_checks.py --rounds 10 --out results/hf-load-checks/bert-base-5-shards.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved, machine, report  # noqa: E402

import maskplay.families.base as base_module  # noqa: E402
import maskplay.families.hf.directory as directory_module  # noqa: E402
import maskplay.families.hf.registry as registry_module  # noqa: E402
import maskplay.runtime.files as files_module  # noqa: E402
import maskplay.runtime.model_dir as model_dir_module  # noqa: E402
from maskplay.families import MaskplayModel  # noqa: E402
from maskplay.families.hf.common import check_hf_sizes  # noqa: E402
from maskplay.families.hf.validate import check_hf_config  # noqa: E402
from maskplay.runtime.json_files import read_json_dict  # noqa: E402
from maskplay.runtime.model_dir import check_sizes_fit  # noqa: E402


def write_bert(directory: Path, hidden: int, layers: int, shard: str) -> None:
    import transformers

    config = transformers.BertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=hidden // 64,
                                     intermediate_size=4 * hidden)
    torch.manual_seed(0)
    transformers.BertForMaskedLM(config).save_pretrained(directory, max_shard_size=shard)


@contextlib.contextmanager
def without_checks():
    """The reading as it was before the checks: whole-file json.loads, no field checks, Path.resolve."""
    def plain_json(path, limit=0):
        return json.loads(Path(path).read_text())

    def plain_inside(directory, name, source):
        return Path(directory) / name

    def plain_file(directory, name):
        return Path(directory) / name

    def coarse_sizes(config, state):  # the widths against the weights' largest dimension, no meta-device model
        check_sizes_fit(config, {k: tuple(v.shape) for k, v in state.items()}, "config.json", "its weights")

    modules = (directory_module, model_dir_module, base_module, files_module)  # each calls model_file by its name
    saved = (directory_module.read_json_dict, directory_module.read_json_file, directory_module.check_hf_config,
             directory_module.file_inside, model_dir_module.read_json_file, registry_module.check_hf_sizes,
             [m.model_file for m in modules])
    directory_module.read_json_dict = directory_module.read_json_file = model_dir_module.read_json_file = plain_json
    directory_module.check_hf_config = lambda data, source: None
    directory_module.file_inside = plain_inside
    registry_module.check_hf_sizes = coarse_sizes
    for module in modules:
        module.model_file = plain_file
    try:
        yield
    finally:
        (directory_module.read_json_dict, directory_module.read_json_file, directory_module.check_hf_config,
         directory_module.file_inside, model_dir_module.read_json_file, registry_module.check_hf_sizes, files) = saved
        for module, model_file in zip(modules, files, strict=True):
            module.model_file = model_file


def load(directory: Path) -> None:
    with contextlib.redirect_stderr(io.StringIO()):  # the one line saying what it converted to
        MaskplayModel.from_pretrained(directory)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--shard", default="100MB", help="max_shard_size of save_pretrained (the hub's shards)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "bert"
        write_bert(directory, args.hidden, args.layers, args.shard)

        def unchecked() -> None:
            with without_checks():
                load(directory)

        medians = interleaved({"with checks": lambda: load(directory), "without checks": unchecked}, args.rounds)
        index = directory / "model.safetensors.index.json"
        sharded = index.is_file()  # a model smaller than --shard is written whole, without an index
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values())) if sharded else []
        # the files a load reads by their fixed names
        names = ["config.json", "head_config.json", "manifest.json", "tokenizer.json", "vocab.txt",
                 index.name if sharded else "model.safetensors"]
        start = time.perf_counter()
        for _ in range(100):
            check_hf_config(read_json_dict(directory / "config.json"), "config.json")
            for name in names:
                files_module.model_file(directory, name)
            for shard in shards:
                files_module.file_inside(directory, shard, index)
        checks_alone = (time.perf_counter() - start) / 100
        architecture, hf_config, state = directory_module.read_hf_dir(directory)
        config = registry_module.converter_for_architecture(architecture).config_from_hf(hf_config)
        start = time.perf_counter()
        for _ in range(10):
            check_hf_sizes(config, state)
        sizes_alone = (time.perf_counter() - start) / 10
    result = {"machine": machine(), "hidden": args.hidden, "layers": args.layers, "shards": len(shards) or 1,
              "rounds": args.rounds, "median_s": medians, "checks_alone_s": checks_alone,
              "sizes_check_alone_s": sizes_alone,
              "ratio": medians["with checks"] / medians["without checks"]}
    report(result, args.out)


if __name__ == "__main__":
    main()
