"""The models the wheel does not bundle are fetched on first use: the real download code (runtime/download.py)
against a local HTTP server serving src/maskplay/assets, as an installed wheel sees it (the assets directory
without them). Resumed partial files (HTTP Range), a server that ignores ranges, a corrupted file, a dropped
connection, no server, offline, and the manifest against the files it describes."""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
from pathlib import Path

import pytest
import tomllib

from maskplay.runtime import download, models
from tests.runtime.file_server import FileServer

REPO = Path(__file__).resolve().parents[2]
ASSETS = REPO / "src" / "maskplay" / "assets"
NAME = "gpt-two-hour"
WEIGHTS = "model.safetensors"


@pytest.fixture
def wheel(tmp_path, monkeypatch):
    """An installation whose package carries no model (models.ASSETS empty), a cache of its own, no env hints."""
    monkeypatch.setattr(models, "ASSETS", tmp_path / "package-assets")
    monkeypatch.setenv("MASKPLAY_CACHE", str(tmp_path / "cache"))
    for name in ("MASKPLAY_OFFLINE", "HF_HUB_OFFLINE", "MASKPLAY_MODELS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def serve(root: Path, monkeypatch) -> FileServer:
    server = FileServer(root)
    monkeypatch.setenv("MASKPLAY_MODELS_URL", server.url)
    return server


def cached(name: str = NAME) -> Path:
    return models.models_dir() / name


def same_files(directory: Path, name: str = NAME) -> bool:
    return all((directory / f).read_bytes() == (ASSETS / name / f).read_bytes()
               for f in models.manifest()["models"][name]["files"])


def test_the_manifest_describes_the_assets_and_the_wheel_leaves_out_the_unbundled():
    manifest = models.manifest()
    assert list(manifest["models"]) == ["tta-mini-wiki", "gpt-mini-wiki", "unilm-titles-mini", "gpt-two-hour",
                                        "tta-two-hour", "tta-two-hour-gutenberg"]
    for name, entry in manifest["models"].items():
        files = {f.name for f in (ASSETS / name).iterdir() if f.is_file()}
        assert set(entry["files"]) == files, name
        for file, e in entry["files"].items():
            data = (ASSETS / name / file).read_bytes()
            assert (len(data), hashlib.sha256(data).hexdigest()) == (e["bytes"], e["sha256"]), f"{name}/{file}: " \
                "stale models.json: python scripts/models_manifest.py"
        assert entry["family"] == json.loads((ASSETS / name / "config.json").read_text())["family"]
    excluded = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["exclude-package-data"]
    assert sorted(excluded["maskplay"]) == sorted(f"assets/{n}/*" for n, e in manifest["models"].items()
                                                  if not e["bundled"])
    assert [n for n, e in manifest["models"].items() if e["bundled"]] == ["tta-mini-wiki", "gpt-mini-wiki",
                                                                          "unilm-titles-mini"]


def test_in_a_clone_every_model_is_bundled(monkeypatch):
    monkeypatch.setenv("MASKPLAY_OFFLINE", "1")
    for name in models.model_names():
        assert models.where(name) == ("bundled", ASSETS / name)
        assert models.fetch_model(name) == ASSETS / name


def test_the_cache_follows_the_environment(monkeypatch, tmp_path):
    for name in ("MASKPLAY_CACHE", "MASKPLAY_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    assert download.cache_root() == Path.home() / ".cache" / "maskplay"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert download.cache_root() == tmp_path / "xdg" / "maskplay"
    monkeypatch.setenv("MASKPLAY_CACHE", str(tmp_path / "mine"))
    assert models.models_dir() == tmp_path / "mine" / "models"


def test_a_model_is_fetched_on_first_use_checked_and_loads(wheel, monkeypatch, capsys):
    from maskplay.cli import main
    from maskplay.families import MaskplayModel

    with serve(ASSETS, monkeypatch) as server:
        assert models.where(NAME)[0] == "to fetch"
        model = MaskplayModel.from_pretrained(NAME)
        assert model.family == "gpt" and same_files(cached())
        assert models.where(NAME) == ("cached", cached())
        assert {path for path, _ in server.requests} == {f"/{NAME}/{f}" for f in models.manifest()["models"][NAME]["files"]}
        assert not list(cached().glob("*.part"))
        count = len(server.requests)
        MaskplayModel.from_pretrained(NAME)  # the cached copy: nothing asked for again
        assert len(server.requests) == count
        assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if row.startswith(NAME + " "))
    assert "gpt" in line and "15.4 MB" in line and f"cached ({cached()})" in line
    assert "to fetch" in next(row for row in out.splitlines() if row.startswith("tta-two-hour "))


def test_the_hub_url_is_the_default(wheel):
    assert models.url(NAME, WEIGHTS) == f"https://huggingface.co/maskplay/{NAME}/resolve/" \
        f"{models.manifest()['revision']}/{WEIGHTS}"


def test_a_partial_download_is_resumed_with_a_range_request(wheel, monkeypatch):
    data = (ASSETS / NAME / WEIGHTS).read_bytes()
    cached().mkdir(parents=True)
    (cached() / (WEIGHTS + ".part")).write_bytes(data[:5_000_000])
    with serve(ASSETS, monkeypatch) as server:
        models.fetch_model(NAME, progress=False)
    assert same_files(cached())
    assert (f"/{NAME}/{WEIGHTS}", "bytes=5000000-") in server.requests


def test_a_server_that_ignores_the_range_still_gives_the_right_file(wheel, monkeypatch):
    data = (ASSETS / NAME / WEIGHTS).read_bytes()
    cached().mkdir(parents=True)
    (cached() / (WEIGHTS + ".part")).write_bytes(data[:1000])
    with serve(ASSETS, monkeypatch) as server:
        server.ignore_range = True
        models.fetch_model(NAME, progress=False)
    assert same_files(cached())


def test_a_dropped_connection_keeps_the_part_and_the_next_call_resumes(wheel, monkeypatch):
    with serve(ASSETS, monkeypatch) as server:
        server.break_after = 3_000_000
        with pytest.raises(download.OfflineError, match=r"interrupted after .* run the command again to resume"):
            models.fetch_model(NAME, progress=False)
        parts = list(cached().glob("*.part"))
        assert parts and all(p.stat().st_size <= 3_000_000 for p in parts)
        server.break_after = None
        models.fetch_model(NAME, progress=False)
    assert same_files(cached()) and not list(cached().glob("*.part"))
    assert any(rng and rng.startswith("bytes=") for _, rng in server.requests)


def test_a_corrupted_download_is_deleted_and_named(wheel, monkeypatch, capsys):
    from maskplay.cli import main

    root = wheel / "server"
    shutil.copytree(ASSETS / NAME, root / NAME)
    data = bytearray((root / NAME / WEIGHTS).read_bytes())
    data[123_456] ^= 0xFF  # same size, other bytes
    (root / NAME / WEIGHTS).write_bytes(bytes(data))
    with serve(root, monkeypatch):
        with pytest.raises(download.ChecksumError, match="sha256 differs .* the partial file was deleted"):
            models.fetch_model(NAME, progress=False)
        assert not (cached() / WEIGHTS).exists() and not (cached() / (WEIGHTS + ".part")).exists()
        assert models.where(NAME)[0] == "to fetch"
        (root / NAME / WEIGHTS).write_bytes(bytes(data[:-10]))  # truncated
        assert main(["models", "fetch", NAME]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "expected 14,886,232" in err and "deleted" in err, err


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("how", ["no server", "MASKPLAY_OFFLINE", "HF_HUB_OFFLINE"])
def test_offline_is_one_line_naming_the_command_that_fetches(wheel, monkeypatch, capsys, how):
    from maskplay.cli import main

    with serve(ASSETS, monkeypatch) as server:
        if how == "no server":
            monkeypatch.setenv("MASKPLAY_MODELS_URL", f"http://127.0.0.1:{_closed_port()}")
        else:
            monkeypatch.setenv(how, "1")
        assert main(["score", NAME, "the cat sat ."]) == 2
        assert not server.requests
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("maskplay score: error: model gpt-two-hour is not in this installation") and \
        f"`maskplay models fetch {NAME}`" in err, err


def test_models_fetch_names_unknown_models(wheel, capsys):
    from maskplay.cli import main

    assert main(["models", "fetch", "gpt-nope"]) == 2
    assert "unknown model gpt-nope; the project's models: tta-mini-wiki" in capsys.readouterr().err
    assert main(["models", "fetch"]) == 2
    assert "--all" in capsys.readouterr().err


def test_models_fetch_all_gets_every_model_not_bundled(wheel, monkeypatch, capsys):
    from maskplay.cli import main

    (models.ASSETS / "tta-mini-wiki").mkdir(parents=True)  # as the wheel: the mini models bundled
    shutil.copy(ASSETS / "tta-mini-wiki" / "config.json", models.ASSETS / "tta-mini-wiki" / "config.json")
    with serve(ASSETS, monkeypatch) as server:
        assert main(["models", "fetch", "tta-mini-wiki", "tta-two-hour"]) == 0
        assert {p.split("/")[1] for p, _ in server.requests} == {"tta-two-hour"}
    out = capsys.readouterr().out
    assert "tta-mini-wiki: " in out and "(bundled)" in out and "tta-two-hour: " in out and "(fetched)" in out
    assert same_files(cached("tta-two-hour"), "tta-two-hour")


def test_two_fetches_at_once_take_turns(wheel, monkeypatch):
    """torchrun's ranks (or two commands) asking for the same model: one downloads, the other finds it done."""
    from concurrent.futures import ThreadPoolExecutor

    with serve(ASSETS, monkeypatch) as server:
        with ThreadPoolExecutor(2) as pool:
            dirs = list(pool.map(lambda _: models.fetch_model(NAME, progress=False), range(2)))
    assert dirs == [cached(), cached()] and same_files(cached())
    assert len(server.requests) == len(models.manifest()["models"][NAME]["files"])  # each file once
