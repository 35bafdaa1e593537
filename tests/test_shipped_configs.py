"""Every training config the repository ships (configs/**/*.toml, the files docs/results/ and the README run) loads and
passes the trainer's checks: a config that a refactor left stale fails here, not in a user's hour-long run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomllib

from maskplay.config import ModelConfig, from_dict
from maskplay.tasks.train import TrainConfig, load_train_config
from maskplay.tasks.train.config import train_config_from_dict

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").rglob("*.toml"))


def test_configs_are_found():
    assert len(CONFIGS) >= 20


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_shipped_config_loads_and_validates(path: Path):
    config = load_train_config(path).validate()
    written = tomllib.loads(path.read_text(encoding="utf-8"))
    assert config.model.family == written.get("model", {}).get("family", config.model.family)
    assert config.optim.lr == written.get("optim", {}).get("lr", config.optim.lr)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_shipped_config_round_trips(path: Path):
    """The families' sections live in the families' files now; a file's [model.electra] tables still load into
    them, and a config written back (to_dict, to_toml) reads back equal, its [model.<section>] tables in place."""
    config = load_train_config(path)
    assert train_config_from_dict(config.to_dict()) == config
    assert from_dict(TrainConfig, tomllib.loads(config.to_toml())) == config
    written = tomllib.loads(path.read_text(encoding="utf-8")).get("model", {})
    for name, table in written.items():
        if isinstance(table, dict):
            assert config.to_dict()["model"][name] == {**config.to_dict()["model"][name], **table}


BUNDLED = sorted((Path(__file__).resolve().parents[1] / "src" / "maskplay" / "assets").glob("*/config.json"))


def test_bundled_models_are_found():
    assert len(BUNDLED) >= 5


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.parent.name)
def test_bundled_model_config_round_trips(path: Path):
    """Every bundled model's config.json loads unchanged: each value it writes is read as written (sections
    included), and to_dict -> from_dict gives the same config."""
    config = ModelConfig.from_json(path)
    assert from_dict(ModelConfig, config.to_dict()) == config
    written = json.loads(path.read_text(encoding="utf-8"))
    out = config.to_dict()
    assert {key: out[key] for key in written} == written


def test_the_old_import_of_a_family_section_still_works_with_a_warning():
    from maskplay.families.electra import ElectraConfig

    with pytest.warns(DeprecationWarning, match="moved to maskplay.families.electra.ElectraConfig"):
        from maskplay.config import ElectraConfig as old
    assert old is ElectraConfig
    with pytest.raises(ImportError):
        from maskplay.config import NoSuchConfig  # noqa: F401


def test_a_shipped_recipe_loads_by_name_from_any_directory(tmp_path, monkeypatch):
    """`--config mini-tta` (or `ttq/hour-tta`, or with .toml) is the file under configs/ when no such path exists
    here: the recipes are package data (src/maskplay/configs, the `configs` link in a clone)."""
    from maskplay.tasks.train.recipes import RECIPES, shipped_recipes

    monkeypatch.chdir(tmp_path)
    assert set(shipped_recipes()) == {p.relative_to(p.parents[0] if p.parent.name == "configs" else p.parents[1])
                                      .with_suffix("").as_posix() for p in CONFIGS}
    assert load_train_config("mini-tta") == load_train_config(RECIPES / "mini-tta.toml")
    assert load_train_config("mini-tta.toml").model.family == "tta"
    assert load_train_config("ttq/hour-tta") == load_train_config(RECIPES / "ttq" / "hour-tta.toml")
    (tmp_path / "mini-tta").mkdir()  # a local path of that name wins, and is refused as a directory
    with pytest.raises(ValueError, match="is a directory"):
        load_train_config("mini-tta")


def test_an_unknown_recipe_name_lists_the_shipped_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"config file mini-nope not found, nor is it a shipped recipe: .*"
                                                r"mini-tta.*ttq/hour-tta"):
        load_train_config("mini-nope")


def test_the_cli_pretrain_takes_a_recipe_name(tmp_path, monkeypatch, capsys):
    from maskplay.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["pretrain", "--config", "mini-nope", "--max-steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "mini-gpt-bert" in err, err
