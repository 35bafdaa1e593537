"""Every form a model can be named in, where a model directory is expected (score, embed, eval, generate,
MaskplayModel.from_pretrained, ...): a bundled name, a local directory, a Hub id org/name, a legacy Hub id without
an organisation (bert-base-uncased); and the one-line error, listing the bundled names and the forms, for a name
that is none of them. The Hub is a fake here (huggingface_hub.snapshot_download replaced): no network."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from maskplay.cli import main
from maskplay.families import MaskplayModel
from maskplay.runtime import model_dir
from maskplay.runtime.model_dir import BUNDLED_MODELS, resolve_model_dir

hub = pytest.importorskip("huggingface_hub")


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """snapshot_download that serves tta-mini-wiki's files for any repository in `repos`, recording the calls;
    others are unknown (its own RepositoryNotFoundError-like error), and local_files_only finds nothing."""
    calls: list[dict] = []
    repos = {"maskplay-test/tiny-tta", "bert-base-uncased"}

    def snapshot_download(repo_id: str, allow_patterns=None, local_files_only=False, **kw):
        calls.append({"repo_id": repo_id, "allow_patterns": allow_patterns, "local_files_only": local_files_only})
        if local_files_only:
            raise FileNotFoundError("Cannot find an appropriate cached snapshot folder for the specified revision "
                                    "on the local disk and outgoing traffic has been disabled.")
        if repo_id not in repos:
            raise OSError(f"404 Client Error. Repository Not Found for url: https://huggingface.co/api/models/{repo_id}"
                          "\nPlease make sure you specified the correct `repo_id`.")
        target = tmp_path / "hub-cache" / repo_id.replace("/", "--")
        if not target.exists():
            shutil.copytree(BUNDLED_MODELS["tta-mini-wiki"], target)
        return str(target)

    monkeypatch.setattr(hub, "snapshot_download", snapshot_download)
    for name in ("MASKPLAY_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return calls


def test_a_bundled_name(fake_hub):
    assert resolve_model_dir("tta-mini-wiki") == BUNDLED_MODELS["tta-mini-wiki"]
    assert not fake_hub


def test_a_local_directory_wins_over_a_bundled_name(fake_hub, tmp_path):
    shutil.copytree(BUNDLED_MODELS["gpt-mini-wiki"], tmp_path / "tta-mini-wiki")
    assert resolve_model_dir("tta-mini-wiki") == Path("tta-mini-wiki")
    assert MaskplayModel.from_pretrained("tta-mini-wiki").family == "gpt"
    assert resolve_model_dir(tmp_path / "tta-mini-wiki") == tmp_path / "tta-mini-wiki"


@pytest.mark.parametrize("repo_id", ["maskplay-test/tiny-tta", "bert-base-uncased"])
def test_a_hub_id_with_or_without_an_organisation_is_downloaded(fake_hub, repo_id, capsys):
    directory = resolve_model_dir(repo_id)
    assert (directory / "config.json").is_file() and directory.name == repo_id.replace("/", "--")
    assert fake_hub == [{"repo_id": repo_id, "allow_patterns": ["config.json", "model.safetensors", "tokenizer.json"],
                         "local_files_only": False}]
    fake_hub.clear()
    assert main(["score", repo_id, "the cat sat on the mat ."]) == 0
    assert "the cat sat on the mat" in capsys.readouterr().out


def _one_line_listing_the_forms(err: str, name: str) -> None:
    assert len(err.strip().splitlines()) == 1, err
    assert f"model directory {name} not found" in err
    assert all(n in err for n in BUNDLED_MODELS) and "maskplay models list" in err, err
    assert "org/name" in err and "legacy one such as bert-base-uncased" in err, err


def test_an_unknown_hub_id_says_what_is_accepted(fake_hub, capsys):
    assert main(["score", "no-such-model-anywhere", "a sentence"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("maskplay score: error: ")
    _one_line_listing_the_forms(err, "no-such-model-anywhere")
    assert "the HuggingFace Hub did not give it: OSError: 404 Client Error" in err


@pytest.mark.parametrize("env", ["MASKPLAY_OFFLINE", "HF_HUB_OFFLINE"])
def test_a_legacy_id_offline_looks_in_the_cache_only_and_says_how_to_get_it(fake_hub, monkeypatch, capsys, env):
    monkeypatch.setenv(env, "1")
    assert main(["score", "bert-base-uncased", "a sentence"]) == 2
    err = capsys.readouterr().err
    _one_line_listing_the_forms(err, "bert-base-uncased")
    assert "not in the Hub's local cache, and maskplay is offline" in err
    assert fake_hub and all(call["repo_id"] == "bert-base-uncased" and call["local_files_only"] for call in fake_hub)


def test_the_real_huggingface_hub_offline_gives_the_same_error(tmp_path, monkeypatch, capsys):
    """No fake: huggingface_hub's own snapshot_download, offline, over an empty Hub cache."""
    monkeypatch.setenv("MASKPLAY_OFFLINE", "1")
    monkeypatch.setattr(hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as err:
        resolve_model_dir("bert-base-uncased")
    _one_line_listing_the_forms(str(err.value), "bert-base-uncased")


@pytest.mark.parametrize("name", ["./nope", "/no/such/model/dir", "runs/a/b"])
def test_a_missing_path_lists_the_forms_and_is_never_looked_up(fake_hub, name):
    with pytest.raises(FileNotFoundError) as err:
        resolve_model_dir(name)
    _one_line_listing_the_forms(str(err.value), name)
    assert not fake_hub


def test_without_huggingface_hub_a_hub_id_says_what_to_install(fake_hub, monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(FileNotFoundError, match="pip install huggingface_hub") as err:
        model_dir.resolve_model_dir("someone/model")
    _one_line_listing_the_forms(str(err.value), "someone/model")
