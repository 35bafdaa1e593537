"""HuggingFace model directories from strangers: a damaged config.json, a sentence-transformers modules.json or a
sharded index that points outside the directory, a config that never ends, a tokenizer without the token a method
needs, custom code and pickles. Each case is one line naming the file and the field (a ValueError or
FileNotFoundError; `maskplay score DIR TEXT` exits 2 without a traceback), or a documented fallback that says what
it did; nothing in the directory runs, and nothing outside it is opened or even stat-ed. The fixtures are tiny
random models built with transformers' own classes, then damaged."""

from __future__ import annotations

import builtins
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from maskplay.families import MaskplayModel  # noqa: E402
from maskplay.tasks.score import Embedder, Scorer  # noqa: E402
from tests.families.hf.hf_masked_support import write_tokenizer  # noqa: E402
from tests.families.hf.test_hf_causal_tokenizers import gpt2_dir, llama_dir  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
SIZES = dict(vocab_size=160, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=40)
BERT_SPECIALS = {0: "[PAD]", 100: "[UNK]", 101: "[CLS]", 102: "[SEP]", 103: "[MASK]"}
ROBERTA_SPECIALS = {0: "<s>", 1: "<pad>", 2: "</s>", 3: "<unk>", 159: "<mask>"}
POOLING = "sentence_transformers.models.Pooling"


def _bert(directory: Path) -> None:
    torch.manual_seed(0)
    transformers.BertForMaskedLM(transformers.BertConfig(**SIZES)).save_pretrained(directory)
    write_tokenizer(directory, BERT_SPECIALS, 160)


def _roberta(directory: Path) -> None:
    torch.manual_seed(0)
    config = transformers.RobertaConfig(**SIZES, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2)
    transformers.RobertaForMaskedLM(config).save_pretrained(directory)
    write_tokenizer(directory, ROBERTA_SPECIALS, 160)


def _sentence_transformers(directory: Path) -> None:
    """A headless BertModel as sentence-transformers saves one: modules.json and 1_Pooling/config.json (mean)."""
    torch.manual_seed(0)
    transformers.BertModel(transformers.BertConfig(**SIZES)).save_pretrained(directory)
    write_tokenizer(directory, BERT_SPECIALS, 160)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": POOLING}]
    (directory / "modules.json").write_text(json.dumps(modules))
    (directory / "1_Pooling").mkdir()
    (directory / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "mean"}))


BUILDERS = {"bert": _bert, "roberta": _roberta, "gpt2": gpt2_dir, "llama": llama_dir, "st": _sentence_transformers}


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """One valid directory of each kind, built once; each test damages a copy (copy_of)."""
    root = tmp_path_factory.mktemp("hf-valid")
    out = {}
    for name, build in BUILDERS.items():
        (root / name).mkdir()
        build(root / name)
        out[name] = root / name
    return out


def copy_of(made: dict[str, Path], kind: str, target: Path, **changes) -> Path:
    """A copy of the `kind` directory with config.json's keys changed (a value of DROP removes the key)."""
    shutil.copytree(made[kind], target, symlinks=True)
    config = json.loads((target / "config.json").read_text())
    config.update(changes)
    (target / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not DROP}))
    return target


DROP = object()


def one_line(err: BaseException, *needles: str) -> str:
    message = str(err)
    assert len(message.splitlines()) == 1 and "Traceback" not in message, message
    for needle in needles:
        assert needle in message, message
    return message


def load(directory: Path):
    """What `maskplay score` does with a directory: the model, its tokenizer, a scorer of the family's method."""
    return Scorer.from_pretrained(directory)


# ---- item 2: every field of config.json is checked before it is used -----------------------------------------

CONFIG_CASES = [
    ("bert", {"architectures": {"BertForMaskedLM": 1}}, '"architectures"'),
    ("bert", {"architectures": True}, '"architectures"'),
    ("gpt2", {"architectures": False}, '"architectures"'),
    ("bert", {"architectures": "BertForMaskedLM"}, '"architectures"'),
    ("llama", {"architectures": [3]}, '"architectures"'),
    ("bert", {"architectures": ["BertForMaskedLM", "RobertaForMaskedLM"]}, '"architectures" names 2 classes'),
    ("bert", {"model_type": "gpt2"}, '"model_type"'),
    ("roberta", {"model_type": "weird"}, '"model_type"'),
    ("bert", {"hidden_size": "32"}, '"hidden_size"'),
    ("bert", {"num_attention_heads": 5}, '"num_attention_heads": 5 does not divide "hidden_size"'),
    ("gpt2", {"n_head": 5}, '"n_head"'),
    ("roberta", {"type_vocab_size": -1}, '"type_vocab_size"'),
    ("bert", {"layer_norm_eps": -1.0}, '"layer_norm_eps"'),
    ("llama", {"num_key_value_heads": "2"}, '"num_key_value_heads"'),
    ("llama", {"num_key_value_heads": 3}, '"num_key_value_heads": 3 does not divide'),
    ("llama", {"rms_norm_eps": "x"}, '"rms_norm_eps"'),
    ("llama", {"rms_norm_eps": -1e-6}, '"rms_norm_eps"'),
    ("llama", {"head_dim": "x"}, '"head_dim"'),
    ("llama", {"attention_dropout": "x"}, '"attention_dropout"'),
    ("llama", {"rope_theta": -1.0}, '"rope_theta"'),
    ("llama", {"partial_rotary_factor": 2.0}, '"partial_rotary_factor"'),
    ("llama", {"rope_scaling": "linear"}, '"rope_scaling"'),
    ("llama", {"rope_scaling": {"type": "linear", "factor": 2.0}}, "RoPE scaling 'linear' is not supported"),
    ("llama", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "RoPE scaling 'yarn' is not supported"),
    ("llama", {"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5}}, "RoPE scaling 'llama3'"),
    ("llama", {"rope_parameters": {"rope_type": "default", "rope_theta": "x"}}, '"rope_parameters"."rope_theta"'),
    ("st", {"architectures": {"a": 1}}, '"architectures"'),
]


@pytest.mark.parametrize("kind,changes,field", CONFIG_CASES,
                         ids=[f"{k}-{','.join(c)}-{i}" for i, (k, c, _) in enumerate(CONFIG_CASES)])
def test_a_damaged_config_field_is_one_line_naming_file_and_field(made, tmp_path, kind, changes, field):
    directory = copy_of(made, kind, tmp_path / kind, **changes)
    with pytest.raises(ValueError) as found:
        MaskplayModel.from_pretrained(directory)
    one_line(found.value, str(directory / "config.json"), field)


def test_the_valid_directories_load(made):
    """The fixtures themselves load: the failures above are the damage's."""
    for kind in ("bert", "roberta", "gpt2", "llama"):
        assert load(made[kind]).score(["a cat"])[0].log_prob < 0
    assert Embedder.from_pretrained(made["st"]).model.hf_pooling == "mean-tokens"


@pytest.mark.parametrize("changes,needle", [
    ({"position_buckets": 10**12}, "relative_buckets (1000000000000)"),
    ({"max_relative_positions": 10**12, "position_buckets": 10**12}, "parameters from weights of"),
])
def test_sizes_no_width_shows_are_checked_before_building(tmp_path, changes, needle):
    """DeBERTa's relative table grows with position_buckets, which no other size bounds: before, 10^12 buckets
    allocated 16 TB (a MemoryError at best)."""
    from tests.families.hf.test_hf_masked import CASES
    from tests.test_hostile_input import address_space_cap

    CASES["deberta-v3"][0]().save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **changes}))
    with address_space_cap(), pytest.raises(ValueError) as found:
        MaskplayModel.from_pretrained(tmp_path)
    one_line(found.value, str(tmp_path), needle)


def test_the_size_check_builds_its_meta_model_without_random_initialisers(made):
    """The model built on the meta device is only looked at (its parameters counted, its buffers sized): filling it
    with random numbers was most of the check's time (BERT-base: about three quarters)."""
    from maskplay.families.hf.common import check_hf_sizes
    from maskplay.families.hf.directory import read_hf_dir
    from maskplay.families.hf.registry import converter_for_architecture

    architecture, hf_config, state = read_hf_dir(made["bert"])
    config = converter_for_architecture(architecture).config_from_hf(hf_config)
    called: list[str] = []

    class Count(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            called.append(getattr(func, "__name__", ""))
            return func(*args, **(kwargs or {}))

    with Count():
        check_hf_sizes(config, state)
    assert not [name for name in called if name in ("normal_", "uniform_", "trunc_normal_")], sorted(set(called))


def test_a_vocabulary_smaller_than_the_tokenizers_is_one_line(made, tmp_path):
    torch.manual_seed(0)
    transformers.BertForMaskedLM(transformers.BertConfig(**{**SIZES, "vocab_size": 120})).save_pretrained(tmp_path)
    write_tokenizer(tmp_path, BERT_SPECIALS, 160)
    with pytest.raises(ValueError) as found:
        load(tmp_path)
    one_line(found.value, "vocab_size: model 120 vs tokenizer 160")


LOW_SPECIALS = {0: "[PAD]", 1: "[UNK]", 2: "[CLS]", 3: "[SEP]", 4: "[MASK]"}


@pytest.mark.parametrize("pieces,refused", [(5, True), (79, True), (80, False), (159, False)])
def test_a_tokenizer_of_under_half_the_embedding_rows_is_refused(made, tmp_path, pieces, refused):
    """A padded table stays allowed (checkpoints pad theirs a little); a tokenizer of under half its rows is another
    model's. Before, a 160-row BERT with a 5-piece tokenizer.json scored, every word [UNK]."""
    from maskplay.tasks.export import export_to_hf

    directory = copy_of(made, "bert", tmp_path / "m")
    write_tokenizer(directory, LOW_SPECIALS, pieces)
    tokenizer = directory / "tokenizer.json"
    users = [lambda: load(directory), lambda: Embedder.from_pretrained(directory),
             lambda: MaskplayModel.from_pretrained(directory), lambda: export_to_hf(directory, tmp_path / "hf")]
    if not refused:
        assert load(directory).score(["a cat"])[0].log_prob < 0
        return
    for use in users:
        with pytest.raises(ValueError) as found:
            use()
        one_line(found.value, f"{tokenizer} has {pieces} pieces for the 160 embedding rows of {directory}: not this "
                              "model's tokenizer")
    assert not (tmp_path / "hf").exists()


def test_a_model_object_with_a_tokenizer_of_under_half_its_rows_is_refused(made):
    """The Python API's check (score.passes.check_compatible) where a model and a tokenizer are given apart."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import models, pre_tokenizers

    from maskplay.data.tokenizer import Tokenizer

    backend = Backend(models.WordPiece({t: i for i, t in LOW_SPECIALS.items()}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    model = MaskplayModel.from_pretrained(made["bert"])
    with pytest.raises(ValueError) as found:
        Scorer(model, Tokenizer(backend, roles={}))
    one_line(found.value, "has 5 pieces for the 160 embedding rows of the model: not this model's tokenizer")


# ---- a config.json that never ends, is not a file, or nests without end -----------------------------------------

@pytest.mark.parametrize("kind", ["dev-zero", "directory", "sparse-40mb", "deep", "binary"])
def test_a_config_that_never_ends_or_is_no_json_is_one_line(made, tmp_path, kind):
    directory = copy_of(made, "bert", tmp_path / "m")
    config = directory / "config.json"
    config.unlink()
    if kind == "dev-zero":
        config.symlink_to("/dev/zero")
    elif kind == "directory":
        config.mkdir()
    elif kind == "sparse-40mb":  # a file of 40 MB, of holes: not read whole into memory
        with open(config, "wb") as f:
            f.truncate(40 << 20)
    elif kind == "deep":
        config.write_text('{"architectures": ["BertForMaskedLM"], "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    else:
        config.write_bytes(b"\xff\xfe{\x00")
    with pytest.raises((ValueError, FileNotFoundError)) as found:
        load(directory)
    one_line(found.value, str(config))


def test_a_tokenizer_config_that_never_ends_is_passed_over(made, tmp_path):
    """tokenizer_config.json only names roles the tokenizer may lack: /dev/zero there is skipped, not read."""
    directory = copy_of(made, "bert", tmp_path / "m")
    (directory / "tokenizer_config.json").symlink_to("/dev/zero")
    assert load(directory).score(["a cat"])[0].log_prob < 0


# ---- item 1: nothing outside the directory is read, nothing in it runs --------------------------------------------

class Spy:
    """Every path os.stat / os.lstat / open are asked about, to show that a path outside was never looked at."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.paths: list[str] = []
        self.followed: list[str] = []  # the paths of the calls that follow a symbolic link (stat, open)
        for module, name in ((os, "stat"), (os, "lstat"), (os, "open"), (builtins, "open"), (io, "open")):
            real = getattr(module, name)
            monkeypatch.setattr(module, name, self._wrap(real, follows=name != "lstat"))

    def _wrap(self, real, follows: bool):
        def spy(path, *args, **kwargs):
            if isinstance(path, (str, bytes, os.PathLike)):
                self.paths.append(os.fsdecode(path))
                if follows and kwargs.get("follow_symlinks", True):
                    self.followed.append(os.fsdecode(path))
            return real(path, *args, **kwargs)
        return spy

    def touched(self, secret: Path) -> list[str]:
        return [p for p in self.paths if Path(p).name == secret.name]

    def reached(self, secret: Path) -> list[str]:
        """The calls that opened or stat-ed `secret`, by its own name or through a link."""
        followed, target = list(self.followed), os.path.realpath(secret)
        return [p for p in followed if os.path.realpath(p) == target]


def _secret(tmp_path: Path) -> Path:
    secret = tmp_path / "outside-secret.json"
    secret.write_text(json.dumps({"pooling_mode": "cls"}) + " " * 1200)
    return secret


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "symlink"])
def test_a_manifest_naming_a_file_outside_is_refused_without_stat(made, tmp_path, kind, monkeypatch):
    secret = _secret(tmp_path)
    directory = copy_of(made, "bert", tmp_path / "m")
    if kind == "symlink":
        (directory / "link.json").symlink_to(secret)
    name = {"absolute": str(secret), "dotdot": f"../{secret.name}", "symlink": "link.json"}[kind]
    (directory / "manifest.json").write_text(json.dumps({"format": 1, "files": {name: {"sha256": "0", "bytes": 1}}}))
    spy = Spy(monkeypatch)
    with pytest.raises(ValueError) as found:
        MaskplayModel.from_pretrained(directory)
    touched = spy.touched(secret)
    message = one_line(found.value, "manifest.json lists")
    assert touched == [] and f" {secret.stat().st_size} bytes" not in message


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "symlink"])
def test_a_sharded_index_naming_a_file_outside_is_refused_without_stat(made, tmp_path, kind, monkeypatch):
    from safetensors.torch import load_file, save_file

    secret = _secret(tmp_path)
    directory = copy_of(made, "bert", tmp_path / "m")
    state = load_file(str(directory / "model.safetensors"))
    (directory / "model.safetensors").unlink()
    save_file(state, str(directory / "model-1.safetensors"))
    if kind == "symlink":
        (directory / "model-2.safetensors").symlink_to(secret)
    name = {"absolute": str(secret), "dotdot": f"../{secret.name}", "symlink": "model-2.safetensors"}[kind]
    weight_map = {k: name if i == 0 else "model-1.safetensors" for i, k in enumerate(state)}
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    spy = Spy(monkeypatch)
    with pytest.raises(ValueError) as found:
        MaskplayModel.from_pretrained(directory)
    one_line(found.value, "model.safetensors.index.json lists")
    assert spy.touched(secret) == []


def _vocab_txt(directory: Path) -> None:
    """A BERT directory with vocab.txt as its only tokenizer (as older checkpoints ship)."""
    vocab = json.loads((directory / "tokenizer.json").read_text())["model"]["vocab"]
    (directory / "vocab.txt").write_text("".join(t + "\n" for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])))
    (directory / "tokenizer.json").unlink()


def _pickled(directory: Path) -> None:
    from safetensors.torch import load_file

    torch.save(load_file(str(directory / "model.safetensors")), directory / "pytorch_model.bin")
    (directory / "model.safetensors").unlink()


def _maskplay(directory: Path) -> None:
    from tests.tasks.export.test_export_hf import saved, tiny

    saved(tiny("bert"), directory)
    (directory / "manifest.json").unlink()  # its weights' sha256 would be checked first


def _counted(directory: Path) -> None:
    """A maskplay model with the piece counts `embed --pooling sif` reads by default."""
    import numpy as np

    from maskplay.tasks.score.embed import PIECE_COUNTS

    _maskplay(directory)
    vocab = json.loads((directory / "config.json").read_text())["vocab_size"]
    np.save(directory / PIECE_COUNTS, np.ones(vocab))


def _frequencies(directory: Path):
    from maskplay.tasks.score.embed import read_piece_counts

    return read_piece_counts(directory, json.loads((directory / "config.json").read_text())["vocab_size"])


def _embed(directory: Path):
    return Embedder.from_pretrained(directory)


def _export(directory: Path):
    from maskplay.tasks.export import export_to_hf

    return export_to_hf(directory, directory.parent / "hf-out")


# (fixture, its preparation, the file made a link out, what reads the directory): each file is moved out of the
# directory and linked back, so that before the fix the directory loaded (from the outside file) as if whole
LINKED_OUT = [
    ("bert", None, "config.json", load), ("bert", None, "model.safetensors", load),
    ("bert", None, "tokenizer.json", load), ("bert", _vocab_txt, "vocab.txt", load),
    ("bert", _pickled, "pytorch_model.bin", load), ("st", None, "modules.json", _embed),
    ("st", None, "1_Pooling/config.json", _embed), ("bert", None, "config.json", _export),
    ("maskplay", _maskplay, "config.json", load), ("maskplay", _maskplay, "model.safetensors", load),
    ("maskplay", _maskplay, "tokenizer.json", load), ("maskplay", _maskplay, "model.safetensors", _export),
    ("maskplay", _counted, "piece_counts.npy", _embed), ("maskplay", _counted, "piece_counts.npy", _frequencies),
]


@pytest.mark.parametrize("kind,prepare,name,use", LINKED_OUT,
                         ids=[f"{k}-{n}-{u.__name__.strip('_')}" for k, _, n, u in LINKED_OUT])
def test_a_file_that_is_a_symbolic_link_out_is_refused_without_stat(made, tmp_path, monkeypatch, kind, prepare,
                                                                     name, use):
    """config.json, the weights, the tokenizer, sentence-transformers' files: each read by its fixed name, each
    refused when it is a link out of the directory, before its target is opened or stat-ed. Before, the outside
    file was read as the model's (`ln -s /elsewhere/config.json DIR/config.json`; tokenizer.json -> /etc/passwd)."""
    if kind == "maskplay":
        directory = tmp_path / "m"
        directory.mkdir()
    else:
        directory = copy_of(made, kind, tmp_path / "m")
    if prepare is not None:
        prepare(directory)
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret-file"
    (directory / name).rename(secret)
    (directory / name).symlink_to(secret)
    spy = Spy(monkeypatch)
    with pytest.raises(ValueError) as found:
        use(directory)
    one_line(found.value, f"{directory / name} is a symbolic link to {secret}, out of ", "not read")
    touched = spy.touched(secret)  # before reached(), whose realpath looks at the link itself
    assert touched == [] and spy.reached(secret) == []
    assert not (tmp_path / "hf-out").exists()


@pytest.mark.parametrize("how", ["relative", "absolute", "chain"])
def test_a_link_that_stays_inside_is_followed(made, tmp_path, how):
    """Links inside the directory are the owner's business: followed (read by their text, then opened)."""
    directory = copy_of(made, "bert", tmp_path / "m")
    (directory / "real").mkdir()
    (directory / "config.json").rename(directory / "real" / "config.json")
    if how == "chain":  # config.json -> alias.json -> real/config.json
        (directory / "alias.json").symlink_to("real/config.json")
        (directory / "config.json").symlink_to("alias.json")
    else:
        (directory / "config.json").symlink_to(directory.resolve() / "real/config.json" if how == "absolute"
                                               else "real/config.json")
    assert load(directory).score(["a cat"])[0].log_prob < 0


def test_a_tokenizer_config_linked_out_is_passed_over_unread(made, tmp_path, monkeypatch):
    """tokenizer_config.json is optional (its roles fill what tokenizer.json's names do not): a link out is not
    read, and the directory loads without it."""
    directory = copy_of(made, "bert", tmp_path / "m")
    secret = tmp_path / "outside-config.json"
    secret.write_text(json.dumps({"tokenizer_class": "NoSuchTokenizer", "mask_token": "[CLS]"}))
    (directory / "tokenizer_config.json").symlink_to(secret)
    spy = Spy(monkeypatch)
    scorer = load(directory)
    assert spy.reached(secret) == [] and scorer.tokenizer.special.mask == 103


def test_the_command_line_refuses_a_config_linked_out_in_one_line(made, tmp_path, capsys):
    from maskplay.cli import main

    directory = copy_of(made, "bert", tmp_path / "m")
    other = copy_of(made, "bert", tmp_path / "other", num_hidden_layers=1)
    (directory / "config.json").unlink()
    (directory / "config.json").symlink_to(other / "config.json")
    capsys.readouterr()
    assert main(["score", str(directory), "a cat"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"maskplay score: error: {directory / 'config.json'} is a symbolic link to "
                                f"{other / 'config.json'}, out of {directory}: not read (a model directory's files "
                                "must be inside it)"], err


def _classifier(directory: Path) -> None:
    torch.manual_seed(0)
    transformers.BertForSequenceClassification(transformers.BertConfig(**SIZES, num_labels=2)).save_pretrained(directory)
    write_tokenizer(directory, BERT_SPECIALS, 160)


@pytest.mark.parametrize("command,name", [
    ("convert", "tokenizer.json"), ("convert", "tokenizer_config.json"), ("convert", "config.json"),
    ("finetune-convert", "config.json"), ("finetune-convert", "tokenizer.json"), ("distill", "config.json"),
])
def test_the_commands_that_copy_or_convert_a_directory_refuse_a_link_out(made, tmp_path, capsys, monkeypatch,
                                                                         command, name):
    """`convert --from-hf` and `finetune-convert --from-hf` copy the tokenizer files as they are, `distill` converts
    a HuggingFace teacher: none of them reads a file linked in from outside."""
    if command == "finetune-convert":
        directory = tmp_path / "m"
        _classifier(directory)
    else:
        directory = copy_of(made, "gpt2" if name == "tokenizer_config.json" else "bert", tmp_path / "m")
    secret = tmp_path / "outside" / "secret-file"
    secret.parent.mkdir()
    (directory / name).rename(secret)
    (directory / name).symlink_to(secret)
    out = tmp_path / "out"
    argv = {"convert": ["convert", "--from-hf", str(directory), "--out", str(out)],
            "finetune-convert": ["finetune-convert", "--from-hf", str(directory), "--out", str(out)],
            "distill": ["distill", "prepare", str(directory), "--data", str(tmp_path), "--out", str(out)]}[command]
    if command == "distill":  # a prepared directory's train split, so that the teacher is what is refused
        from maskplay.data.dataset import write_split

        write_split(tmp_path / "train", [[2, 5, 3]], 160)
    from maskplay.cli import main

    capsys.readouterr()
    spy = Spy(monkeypatch)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{directory / name} is a symbolic link to {secret}, out of" in err, err
    touched = spy.touched(secret)
    assert touched == [] and spy.reached(secret) == [] and not out.exists()


def test_a_teachers_identity_leaves_out_a_link_out(made, tmp_path, monkeypatch):
    """The identity of a HuggingFace teacher (which conversion to reuse) reads the head of each file: not of one
    linked in from outside."""
    from maskplay.tasks.distill.converted import source_identity

    directory = copy_of(made, "bert", tmp_path / "m")
    before = source_identity(directory)
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    (directory / "notes.txt").symlink_to(secret)
    spy = Spy(monkeypatch)
    assert source_identity(directory) == before
    touched = spy.touched(secret)
    assert touched == [] and spy.reached(secret) == []


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "symlink"])
def test_a_pooling_path_outside_the_directory_is_refused_not_obeyed(made, tmp_path, kind, monkeypatch):
    """The outside folder's config says cls pooling: before the fix it was read and obeyed."""
    outside = tmp_path / "outside-pool"
    outside.mkdir()
    (outside / "config.json").write_text(json.dumps({"pooling_mode": "cls"}))
    directory = copy_of(made, "st", tmp_path / "m")
    if kind == "symlink":
        (directory / "2_Pooling").symlink_to(outside)
    path = {"absolute": str(outside), "dotdot": "../outside-pool", "symlink": "2_Pooling"}[kind]
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": path, "type": POOLING}]
    (directory / "modules.json").write_text(json.dumps(modules))
    spy = Spy(monkeypatch)
    with pytest.raises(ValueError) as found:
        Embedder.from_pretrained(directory)
    one_line(found.value, "modules.json lists")
    assert [p for p in spy.paths if "outside-pool" in p] == []


@pytest.mark.parametrize("content,field", [
    ('{"a": 1}', "a list of modules"), ("[1, 2]", "module 0 is 1"), ('["x"]', "module 0 is 'x'"), ("[null]", "module 0"),
    ('[{"type": 5}]', '"type": 5'), (f'[{{"type": "{POOLING}", "path": ["x"]}}]', '"path"'), ("nope", "not readable JSON"),
])
def test_a_malformed_modules_json_is_one_line(made, tmp_path, content, field):
    directory = copy_of(made, "st", tmp_path / "m")
    (directory / "modules.json").write_text(content)
    with pytest.raises(ValueError) as found:
        Embedder.from_pretrained(directory)
    one_line(found.value, str(directory / "modules.json"), field)


@pytest.mark.parametrize("content,field", [
    ("[1]", "a JSON object was expected"), ('{"pooling_mode": 5}', '"pooling_mode"'), ("{", "not readable JSON"),
    ('{"pooling_mode_mean_tokens": "yes"}', '"pooling_mode_mean_tokens"'), (None, "has no config.json"),
    ("/dev/zero", "is a symbolic link to /dev/zero, out of"), ("fifo", "not a regular file"),
])
def test_a_malformed_pooling_config_is_one_line(made, tmp_path, content, field):
    directory = copy_of(made, "st", tmp_path / "m")
    config = directory / "1_Pooling" / "config.json"
    config.unlink()
    if content == "/dev/zero":
        config.symlink_to(content)
    elif content == "fifo":  # opening it would wait for a writer forever
        os.mkfifo(config)
    elif content is not None:
        config.write_text(content)
    with pytest.raises((ValueError, FileNotFoundError)) as found:
        Embedder.from_pretrained(directory)
    one_line(found.value, field)


def _custom_code(directory: Path, marker: Path) -> None:
    """modeling / configuration / tokenization files that leave `marker` when imported, named by auto_map."""
    for name in ("modeling_evil.py", "configuration_evil.py", "tokenization_evil.py"):
        (directory / name).write_text(f"open({str(marker)!r}, 'w').write({name!r})\n")
    config = json.loads((directory / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig", "AutoModelForMaskedLM": "modeling_evil.Evil"}
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "EvilTokenizer", "auto_map": {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}}))


def test_custom_code_is_never_imported(made, tmp_path):
    """auto_map is not obeyed: the architecture's converter reads the weights; a class only custom code defines
    is an unknown architecture, one line."""
    marker = tmp_path / "ran"
    directory = copy_of(made, "bert", tmp_path / "m")
    _custom_code(directory, marker)
    assert load(directory).score(["a cat"])[0].log_prob < 0
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "architectures": ["Evil"]}))
    with pytest.raises(ValueError) as found:
        load(directory)
    one_line(found.value, "'Evil' is not one maskplay reads")
    assert not marker.exists() and not any("evil" in m for m in sys.modules)


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # torch's note on a plain pickle.dumps file
@pytest.mark.parametrize("how", ["torch.save", "pickle"])
def test_a_pickle_with_code_is_refused_and_never_run(made, tmp_path, how):
    marker = tmp_path / "ran"
    directory = copy_of(made, "bert", tmp_path / "m")
    (directory / "model.safetensors").unlink()
    if how == "pickle":
        (directory / "pytorch_model.bin").write_bytes(pickle.dumps({"w": _Payload(marker)}))
    else:
        torch.save({"w": _Payload(marker)}, directory / "pytorch_model.bin")
    with pytest.raises(ValueError) as found:
        MaskplayModel.from_pretrained(directory)
    one_line(found.value, "pytorch_model.bin", "weights_only=True")
    assert not marker.exists()


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_the_command_line_prints_a_refused_pickle_without_terminal_escapes(made, tmp_path, capsys):
    """torch's weights_only message marks words bold (ESC [1m ... ESC [0m): the printed line is plain text."""
    from maskplay.cli import main

    directory = copy_of(made, "bert", tmp_path / "m")
    (directory / "model.safetensors").unlink()
    torch.save({"w": _Payload(tmp_path / "ran")}, directory / "pytorch_model.bin")
    capsys.readouterr()
    assert main(["score", str(directory), "a cat"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "weights_only=True" in err, err
    assert not any(c < " " or "\x7f" <= c <= "\x9f" for c in err.rstrip("\n")), repr(err)
    assert not (tmp_path / "ran").exists()


# ---- item 3: tokenizers ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,mask", [("roberta", "<mask>"), ("bert", "[MASK]")])
def test_pll_without_a_mask_token_is_refused(made, tmp_path, kind, mask):
    """Before, the end token (</s>, [SEP]) stood in for the missing mask and the scores looked fine."""
    directory = copy_of(made, kind, tmp_path / "m")
    tokenizer = directory / "tokenizer.json"
    tokenizer.write_text(tokenizer.read_text().replace(mask, "<nomask>"))
    with pytest.raises(ValueError) as found:
        load(directory)
    one_line(found.value, "has no mask token", "pll")
    assert Embedder.from_pretrained(directory).encode(["a cat"]).shape == (1, 32)  # embedding needs no mask


@pytest.mark.parametrize("named,noted", [("NoSuchTokenizer", True), (5, True), ("BertTokenizerFast", False),
                                         ("BertTokenizer", False), ("TokenizersBackend", False),
                                         ("LlamaTokenizerFast", False), ("PreTrainedTokenizerFast", False)])
def test_an_unknown_tokenizer_class_is_said_once_at_load(made, tmp_path, capfd, named, noted):
    """The class is never looked up (its code would run); a name maskplay does not know is one notice line."""
    directory = copy_of(made, "bert", tmp_path / "m")
    (directory / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": named, "mask_token": "[MASK]"}))
    capfd.readouterr()
    assert load(directory).score(["a cat"])[0].log_prob < 0
    notes = [line for line in capfd.readouterr().err.splitlines() if "tokenizer_class" in line]
    expected = (f"maskplay: {directory / 'tokenizer_config.json'}: tokenizer_class {named!r} is not one maskplay "
                "knows; reading tokenizer.json as it is")
    assert notes == ([expected] if noted else []), notes


def test_a_causal_lm_without_bos_says_what_it_starts_with(made, tmp_path, capfd):
    """The documented fallback (maskplay.data.tokenizer): the end token starts each sentence; the load line says so."""
    capfd.readouterr()
    load(made["gpt2"])
    assert "no start (bos) token" not in capfd.readouterr().err  # GPT-2 names <|endoftext|> as its bos
    directory = copy_of(made, "gpt2", tmp_path / "m", bos_token_id=None)
    (directory / "tokenizer_config.json").unlink()
    scorer = load(directory)
    err = capfd.readouterr().err
    assert "no start (bos) token" in err and "start with its end token <|endoftext|>" in err
    assert scorer.tokenizer.special.sos == scorer.tokenizer.special.eos


# ---- the command line: exit 2, one line, no traceback -------------------------------------------------------------

def _damage(made: dict[str, Path], tmp_path: Path, case: str) -> Path:
    if case == "architectures":
        return copy_of(made, "bert", tmp_path / "m", architectures={"BertForMaskedLM": True})
    if case == "size":
        return copy_of(made, "llama", tmp_path / "m", hidden_size="48")
    if case == "dev-zero":
        directory = copy_of(made, "bert", tmp_path / "m")
        (directory / "config.json").unlink()
        (directory / "config.json").symlink_to("/dev/zero")
        return directory
    if case == "modules":
        directory = copy_of(made, "st", tmp_path / "m")
        (directory / "modules.json").write_text('{"0": "x"}')
        return directory
    directory = copy_of(made, "roberta", tmp_path / "m")  # no mask token
    tokenizer = directory / "tokenizer.json"
    tokenizer.write_text(tokenizer.read_text().replace("<mask>", "<nomask>"))
    return directory


@pytest.mark.slow
@pytest.mark.parametrize("case", ["architectures", "size", "dev-zero", "modules", "no-mask"])
def test_maskplay_score_on_a_damaged_directory_exits_2_in_one_line(made, tmp_path, case):
    directory = _damage(made, tmp_path, case)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "maskplay", "score", str(directory), "a cat sat"], capture_output=True,
                          text=True, env=env, timeout=300)
    err = done.stderr.strip()
    assert done.returncode == 2 and "Traceback" not in err, err
    # the line saying what the directory converted to comes first when the model itself loads (no mask token)
    lines = [line for line in err.splitlines() if not line.startswith(f"maskplay: {directory} is a HuggingFace")]
    assert len(lines) == 1 and lines[0].startswith("maskplay score: error: "), err


@pytest.mark.parametrize("changes,field", [({"architectures": True}, '"architectures"'),
                                           ({"num_attention_heads": 5}, '"num_attention_heads"')])
def test_finetune_convert_checks_the_config_first(tmp_path, capsys, changes, field):
    from maskplay.cli import main

    config = transformers.BertConfig(**SIZES, num_labels=2)
    transformers.BertForSequenceClassification(config).save_pretrained(tmp_path / "hf")
    data = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**data, **changes}))
    capsys.readouterr()
    assert main(["finetune-convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "mp")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err and "config.json" in err, err


def test_a_hub_cache_snapshot_links_its_shards_into_blobs(made, tmp_path):
    """huggingface_hub's cache: snapshots/REV/NAME are links to ../../blobs/SHA. Those stay readable: the
    repository's blobs/ counts as inside the snapshot."""
    from safetensors.torch import load_file, save_file

    repo = tmp_path / "models--org--bert"
    snapshot, blobs = repo / "snapshots" / "abc123", repo / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    state = load_file(str(made["bert"] / "model.safetensors"))
    keys = sorted(state)
    for i, part in enumerate((keys[: len(keys) // 2], keys[len(keys) // 2:])):
        save_file({k: state[k] for k in part}, str(blobs / f"sha{i}"))
        (snapshot / f"model-{i}.safetensors").symlink_to(f"../../blobs/sha{i}")
    index = {"weight_map": {k: f"model-{0 if k in keys[: len(keys) // 2] else 1}.safetensors" for k in keys}}
    for name, text in (("model.safetensors.index.json", json.dumps(index)),
                       ("config.json", (made["bert"] / "config.json").read_text()),
                       ("tokenizer.json", (made["bert"] / "tokenizer.json").read_text())):
        (blobs / name).write_text(text)
        (snapshot / name).symlink_to(f"../../blobs/{name}")
    a, b = MaskplayModel.from_pretrained(made["bert"]), MaskplayModel.from_pretrained(snapshot)
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())
    assert load(snapshot).score(["a cat"])[0].log_prob < 0  # tokenizer.json too is a link into blobs/
    # the blobs of another repository of the cache are outside
    other = tmp_path / "models--org--other" / "blobs"
    other.mkdir(parents=True)
    (blobs / "config.json").rename(other / "config.json")
    (snapshot / "config.json").unlink()
    (snapshot / "config.json").symlink_to("../../../models--org--other/blobs/config.json")
    with pytest.raises(ValueError) as found:
        MaskplayModel.from_pretrained(snapshot)
    one_line(found.value, f"{snapshot / 'config.json'} is a symbolic link to ../../../models--org--other/blobs")
