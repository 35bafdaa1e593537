"""`maskplay data fetch` against a local server laid out as GitHub's raw files (REPO/COMMIT/PATH), built from the
shared data: every set comes out as the shared layout has it (the oracle), checked; and `maskplay eval` finds
the fetched sets, or says in one line where it searched and which command gets the data."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from maskplay.cli import main
from maskplay.runtime.download import ChecksumError
from maskplay.tasks.eval import common, fetch
from tests.conftest import shared_path
from tests.runtime.file_server import FileServer

SETS = ("blimp", "sts", "sick", "cola", "spelling")  # wiki (66 MB) works as blimp does: gzipped verbatim files


def upstream(root: Path, shared: Path, names=SETS, sick_test_rows: bool = True) -> Path:
    """The upstream files the sets are made from, recovered from the shared copies: blimp's unzipped, SICK.txt
    rebuilt with CRLF, padded cells and TEST rows (which the fetch must drop)."""
    for name in names:
        entry = fetch.manifest()["sets"][name]
        for file in entry["files"]:
            src = shared / entry["folder"] / file["path"]
            dst = root / entry["repo"] / entry["commit"] / file["source"]
            dst.parent.mkdir(parents=True, exist_ok=True)
            if file["how"] == "gzip":
                dst.write_bytes(gzip.decompress(src.read_bytes()))
            elif file["how"] == "sick":
                lines = src.read_text(encoding="utf-8").splitlines()
                rows = [lines[0]]
                for k, line in enumerate(lines[1:]):
                    rows.append(line.replace("\t", " \t", 1))  # a cell with a trailing space: stripped
                    if sick_test_rows and k % 7 == 0:
                        rows.append("\t".join([f"9{k}", "a", "b", "NEUTRAL", "3.0", "x", "y", "a", "b", "d", "d", "TEST"]))
                dst.write_bytes(("\r\n".join(rows) + "\r\n\r\n").encode("utf-8"))
            else:
                shutil.copyfile(src, dst)
    return root


@pytest.fixture
def env(tmp_path, monkeypatch):
    """No data anywhere but what a test fetches: MASKPLAY_DATA unset, no clone beside ../shared/data, an empty
    working directory, a cache of its own."""
    monkeypatch.delenv("MASKPLAY_DATA", raising=False)
    for name in ("MASKPLAY_OFFLINE", "HF_HUB_OFFLINE", "MASKPLAY_DATA_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MASKPLAY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(common, "REPO", tmp_path / "installed")
    (tmp_path / "user" / "work").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "user" / "work")
    return tmp_path


def test_fetched_sets_are_the_shared_layout_file_for_file(env, monkeypatch, capsys):
    shared = shared_path()
    with FileServer(upstream(env / "github", shared)) as server:
        monkeypatch.setenv("MASKPLAY_DATA_URL", server.url)
        assert main(["data", "fetch", *SETS]) == 0
    out = capsys.readouterr().out
    for name in SETS:
        folder = fetch.manifest()["sets"][name]["folder"]
        assert f"{name}: {env / 'cache' / 'data' / folder}" in out
        theirs = sorted(p.relative_to(shared / folder) for p in (shared / folder).rglob("*") if p.is_file())
        ours = sorted(p.relative_to(fetch.data_cache() / folder) for p in (fetch.data_cache() / folder).rglob("*")
                      if p.is_file())
        assert ours == theirs, name
        for rel in ours:
            a, b = (fetch.data_cache() / folder / rel).read_bytes(), (shared / folder / rel).read_bytes()
            if rel.suffix == ".gz":
                a, b = gzip.decompress(a), gzip.decompress(b)
            assert a == b, rel
    assert not list(fetch.data_cache().glob("*.part"))


def test_eval_finds_a_fetched_set_in_the_cache(env, monkeypatch, capsys):
    with FileServer(upstream(env / "github", shared_path(), names=("blimp",))) as server:
        monkeypatch.setenv("MASKPLAY_DATA_URL", server.url)
        assert main(["data", "fetch", "blimp"]) == 0
    capsys.readouterr()
    assert common.find_data("blimp-dev") == fetch.data_cache() / "blimp-dev"
    assert main(["eval", "blimp", "gpt-mini-wiki", "--limit", "2"]) == 0
    assert "BLiMP" in capsys.readouterr().out


def test_eval_without_its_data_names_the_places_searched_and_the_command(env, capsys):
    assert main(["eval", "blimp", "gpt-mini-wiki", "--limit", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    searched = [env / "user" / "shared" / "data", env / "cache" / "data"]
    assert err == (f"maskplay eval: error: blimp-dev not found (searched {searched[0]}, {searched[1]}): get it with "
                   "`maskplay data fetch blimp`, or give its path (--data / --file), or set $MASKPLAY_DATA")
    assert main(["eval", "sts", "gpt-mini-wiki", "--datasets", "sick"]) == 2
    assert "sick/SICK_train_trial.txt not found" in capsys.readouterr().err
    assert main(["eval", "nbest", "gpt-mini-wiki"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"maskplay eval: error: librispeech-nbest-espnet-hubert30 not found (searched {searched[0]}, "
                          f"{searched[1]}): no command fetches it; download ")
    for where in ("github.com/awslabs/mlm-scoring", "dev-clean.am.json", "--file", "--data", "$MASKPLAY_DATA"):
        assert where in err, err


def test_the_search_order(env, monkeypatch):
    clone = env / "clone"
    (clone / "src" / "maskplay").mkdir(parents=True)
    (clone / "pyproject.toml").write_text("")
    monkeypatch.setattr(common, "REPO", clone)
    monkeypatch.setenv("MASKPLAY_DATA", str(env / "mine"))
    (env / "mine").mkdir()
    assert common.data_roots() == [env / "mine", env / "shared" / "data", env / "user" / "shared" / "data",
                                   env / "cache" / "data"]
    (env / "cache" / "data" / "cola").mkdir(parents=True)
    assert common.find_data("cola") == env / "cache" / "data" / "cola"
    (env / "shared" / "data" / "cola").mkdir(parents=True)  # ../shared/data beside the clone comes first
    assert common.find_data("cola") == env / "shared" / "data" / "cola"
    (env / "mine" / "cola").mkdir()
    assert common.find_data("cola") == env / "mine" / "cola"


def test_a_corrupted_file_is_refused_and_leaves_no_set(env, monkeypatch):
    root = upstream(env / "github", shared_path(), names=("cola",))
    entry = fetch.manifest()["sets"]["cola"]
    victim = root / entry["repo"] / entry["commit"] / entry["files"][2]["source"]
    data = bytearray(victim.read_bytes())
    data[100] ^= 1
    victim.write_bytes(bytes(data))
    with FileServer(root) as server:
        monkeypatch.setenv("MASKPLAY_DATA_URL", server.url)
        with pytest.raises(ChecksumError, match="sha256 differs"):
            fetch.fetch_set("cola", progress=False)
    assert not (fetch.data_cache() / "cola").exists()
    with pytest.raises(FileNotFoundError, match="get it with `maskplay data fetch cola`"):
        common.find_data("cola", "raw")


def test_sick_rows_that_differ_from_the_published_set_are_refused(env, monkeypatch):
    root = upstream(env / "github", shared_path(), names=("sick",))
    entry = fetch.manifest()["sets"]["sick"]
    sick = root / entry["repo"] / entry["commit"] / "SICK.txt"
    sick.write_bytes(sick.read_bytes().replace(b"\tTRIAL\r\n", b"\tTEST\r\n", 1))
    with FileServer(root) as server:
        monkeypatch.setenv("MASKPLAY_DATA_URL", server.url)
        with pytest.raises(ChecksumError, match="differ from the published set's"):
            fetch.fetch_set("sick", progress=False)
    assert not (fetch.data_cache() / "sick").exists()


def test_an_interrupted_fetch_is_no_set_and_resumes(env, monkeypatch, capsys):
    root = upstream(env / "github", shared_path(), names=("spelling",))
    entry = fetch.manifest()["sets"]["spelling"]
    last = root / entry["repo"] / entry["commit"] / entry["files"][-1]["source"]
    kept = last.read_bytes()
    last.unlink()  # the server loses the last file: the others are fetched, then HTTP 404
    with FileServer(root) as server:
        monkeypatch.setenv("MASKPLAY_DATA_URL", server.url)
        with pytest.raises(FileNotFoundError, match="HTTP 404"):
            fetch.fetch_set("spelling", progress=False)
        assert (fetch.data_cache() / "rwse-zesch2012.part").is_dir()
        with pytest.raises(FileNotFoundError, match="maskplay data fetch spelling"):
            common.find_data("rwse-zesch2012")
        last.write_bytes(kept)
        server.requests.clear()
        assert main(["data", "fetch", "spelling"]) == 0
        assert [p for p, _ in server.requests] == [f"/{entry['repo']}/{entry['commit']}/{entry['files'][-1]['source']}"]
    assert common.find_data("rwse-zesch2012") == fetch.data_cache() / "rwse-zesch2012"


@pytest.mark.parametrize("how", ["MASKPLAY_OFFLINE", "no server"])
def test_offline_is_one_line_with_the_command(env, monkeypatch, capsys, how):
    if how == "no server":
        monkeypatch.setenv("MASKPLAY_DATA_URL", "http://127.0.0.1:9")
    else:
        monkeypatch.setenv(how, "1")
    assert main(["data", "fetch", "blimp"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("maskplay data: error: data set blimp could not be fetched")
    assert "run `maskplay data fetch blimp` when online" in err


def test_unknown_sets_are_named(env, capsys):
    assert main(["data", "fetch", "glue"]) == 2
    assert "unknown data set glue; the sets: blimp, sts, sick, cola, spelling, wiki" in capsys.readouterr().err
    assert main(["data", "fetch"]) == 2
    assert "--all" in capsys.readouterr().err


def test_the_default_url_is_githubs_raw_files_at_the_commit():
    entry = fetch.manifest()["sets"]["blimp"]
    assert fetch.url(entry, "data/adjunct_island.jsonl") == ("https://raw.githubusercontent.com/alexwarstadt/blimp/"
                                                              "3e56b06fcabca9b30822fc66435fca6b1aa40bb1/data/"
                                                              "adjunct_island.jsonl")


def test_the_manifest_is_the_shared_datas():
    """datasets.json is scripts/data_manifest.py's output for the shared data: every file's sha256 and size."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("data_manifest", Path(__file__).resolve().parents[3] / "scripts" /
                                                  "data_manifest.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.build(shared_path()) == json.loads(fetch.MANIFEST.read_text())
