"""`maskplay export` under hostile or careless input: the model card's YAML front matter holds any --license /
--dataset text and any control character of the model's own card (parsed back with PyYAML, keys and values
compared); the output is always a new directory, checked before any work (never mixed into an existing one,
never a file, never written through); `--revisions` names the damaged or missing words.json; an export to a
native HuggingFace class is not tagged custom_code."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
yaml = pytest.importorskip("yaml")

from maskplay.cli import main  # noqa: E402
from maskplay.tasks.export import export_revisions, export_to_hf  # noqa: E402
from tests.tasks.export.test_export_hf import saved, tiny  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gpt_dir(tmp_path_factory) -> Path:
    return saved(tiny("gpt"), tmp_path_factory.mktemp("gpt") / "mp")


def front_matter(directory: Path) -> dict:
    """The Hub's metadata block of the export's README.md, as a YAML parser reads it."""
    card = (directory / "README.md").read_text(encoding="utf-8")
    found = re.match(r"---\n(.*?)\n---\n", card, flags=re.S)
    assert found, card[:300]
    return yaml.safe_load(found.group(1))


KEYS = {"library_name", "tags", "license", "pipeline_tag"}
HOSTILE = ["mit\nfoo: bar", "a: b", "x # comment", "---", "a\n---\nb: c", "tab\there", "bell\x07 esc\x1b[31m",
           "nul\x00", "del\x7f c1\x85 ls\u2028 ps\u2029", 'quote " and \\ backslash', "- item", "[1, 2]", "{a: 1}",
           "&anchor *alias !tag", "'single'", "yes", "null", "1.5", "", " padded ", "émoji 😀"]


@pytest.mark.parametrize("text", HOSTILE, ids=lambda t: repr(t)[:24])
def test_license_and_dataset_texts_round_trip_through_the_front_matter(gpt_dir, tmp_path, text):
    export_to_hf(gpt_dir, tmp_path / "hf", license=text, datasets=[text, "plain/name"])
    meta = front_matter(tmp_path / "hf")
    assert set(meta) == KEYS | {"datasets"}  # no key injected, none lost
    assert meta["license"] == text
    assert meta["datasets"] == [text, "plain/name"]


def test_a_plain_license_stays_plain(gpt_dir, tmp_path):
    export_to_hf(gpt_dir, tmp_path / "hf", license="apache-2.0")
    assert "\nlicense: apache-2.0\n" in (tmp_path / "hf" / "README.md").read_text()


def test_control_characters_of_the_models_own_card_leave_the_front_matter_valid(tmp_path):
    source = saved(tiny("gpt"), tmp_path / "mp")
    (source / "README.md").write_text("# own\x1b[2J card\n\nbell\x07 here\r\n\n## Dev results\n\n"
                                      "| metric | value | source |\n|---|---|---|\n"
                                      "| ppl\x07\x00 dev | 12.5 | x |\n| acc\x85: #1 | 0.75 | x |\n"
                                      "| broken | nan | x |\n", encoding="utf-8")
    export_to_hf(source, tmp_path / "hf")
    meta = front_matter(tmp_path / "hf")
    metrics = meta["model-index"][0]["results"][0]["metrics"]
    assert [(m["name"], m["value"]) for m in metrics] == [("ppl dev", 12.5), ("acc: #1", 0.75)]
    card = (tmp_path / "hf" / "README.md").read_text(encoding="utf-8")
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", card)
    assert "bell here" in card


def test_a_models_card_that_is_not_utf8_is_one_line(tmp_path, capsys):
    source = saved(tiny("gpt"), tmp_path / "mp")
    (source / "README.md").write_bytes(b"# card \xff\xfe\n")
    assert main(["export", "--to-hf", str(source), "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert "README.md is not UTF-8" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "hf").exists()


def test_a_license_argument_that_is_not_utf8_is_one_line(gpt_dir, tmp_path, capsys):
    assert main(["export", "--to-hf", str(gpt_dir), "--out", str(tmp_path / "hf"), "--license", "mit\udcff"]) == 2
    assert "--license" in capsys.readouterr().err and not (tmp_path / "hf").exists()
    assert main(["export", "--to-hf", str(gpt_dir), "--out", str(tmp_path / "hf"), "--dataset", "a",
                 "--dataset", "b\udcfe"]) == 2
    assert "--dataset 2" in capsys.readouterr().err and not (tmp_path / "hf").exists()


def test_a_twin_export_is_not_tagged_custom_code(gpt_dir, tmp_path):
    export_to_hf(gpt_dir, tmp_path / "twin")
    assert json.loads((tmp_path / "twin" / "config.json").read_text())["architectures"] == ["BertLMHeadModel"]
    assert "custom_code" not in front_matter(tmp_path / "twin")["tags"]
    assert "trust_remote_code" not in (tmp_path / "twin" / "README.md").read_text()
    export_to_hf(gpt_dir, tmp_path / "custom", custom_code=True)
    assert "custom_code" in front_matter(tmp_path / "custom")["tags"]


def test_an_electra_twin_export_is_not_tagged_custom_code(tmp_path):
    export_to_hf(saved(tiny("electra"), tmp_path / "mp"), tmp_path / "hf")
    assert "custom_code" not in front_matter(tmp_path / "hf")["tags"]
    assert "custom_code" not in front_matter(tmp_path / "hf" / "generator")["tags"]


# ---- the output directory ---------------------------------------------------------------------------------------

def _occupied(tmp_path: Path, kind: str) -> Path:
    out = tmp_path / "out"
    if kind == "empty dir":
        out.mkdir()
    elif kind == "non-empty dir":
        out.mkdir()
        (out / "mine.txt").write_text("keep me")
    elif kind == "file":
        out.write_text("keep me")
    else:  # a dangling symbolic link: writing through it would create its target
        out.symlink_to(tmp_path / "elsewhere")
    return out


@pytest.mark.parametrize("kind", ["empty dir", "non-empty dir", "file", "dangling link"])
@pytest.mark.parametrize("how", ["to-hf", "sentence-transformers", "part"])
def test_an_existing_output_is_refused_untouched(gpt_dir, tmp_path, capsys, kind, how):
    out = _occupied(tmp_path, kind)
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = {"to-hf": ["--to-hf", str(gpt_dir)], "sentence-transformers": ["--to-sentence-transformers", str(gpt_dir)],
            "part": [str(gpt_dir), "--export", "generator"]}[how]
    assert main(["export", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out {out} already exists" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    if kind == "non-empty dir":
        assert [p.name for p in out.iterdir()] == ["mine.txt"]
    if kind == "file":
        assert out.read_text() == "keep me"


def test_an_output_below_a_file_is_one_line(gpt_dir, tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert main(["export", "--to-hf", str(gpt_dir), "--out", str(tmp_path / "f" / "hf")]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err


def test_an_unwritable_output_is_refused_before_the_model_is_read(tmp_path, capsys, monkeypatch):
    import maskplay.tasks.export.hf as hf

    def never(*_):
        raise AssertionError("the model was read before the output was checked")

    monkeypatch.setattr(hf, "_load", never)
    out = Path("/proc/maskplay-export-test/hf")  # /proc takes no new directory, not even from root
    assert main(["export", "--to-hf", "gpt-mini-wiki", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write in /proc" in err
    if os.geteuid() != 0:  # root writes in a read-only directory anyway
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        assert main(["export", "--to-hf", "gpt-mini-wiki", "--out", str(locked / "hf")]) == 2
        assert "cannot write in" in capsys.readouterr().err


def test_a_generator_out_inside_out_is_refused_before_writing(tmp_path, capsys):
    source = saved(tiny("electra"), tmp_path / "mp")
    out = tmp_path / "hf"
    for gen in (out / "gen", tmp_path):
        assert main(["export", "--to-hf", str(source), "--out", str(out), "--generator-out", str(gen)]) == 2
        assert capsys.readouterr().err.count("\n") == 1
        assert not out.exists() and not (out / "gen").exists()
    assert main(["export", "--to-hf", str(source), "--out", str(out), "--generator-out", str(tmp_path / "gen")]) == 0


# ---- --revisions ------------------------------------------------------------------------------------------------

@pytest.fixture()
def run_dir(gpt_dir, tmp_path) -> Path:
    """A finished run's layout: final/ and words/100/ (a model directory with words.json)."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(gpt_dir, run / "final")
    shutil.copytree(gpt_dir, run / "words" / "100")
    (run / "words" / "100" / "words.json").write_text(json.dumps({"checkpoint_at_words": 100, "step": 2}))
    return run


@pytest.mark.parametrize("content,message", [
    ("{", "words.json is damaged: not readable JSON"),
    ("[]", "words.json is damaged: a JSON object was expected"),
    (b"\xff\xfe\x00", "words.json is damaged: not readable JSON"),
    ('{"step": 1}', "checkpoint_at_words must be a positive whole number, not None"),
    ('{"checkpoint_at_words": "100"}', "checkpoint_at_words must be a positive whole number, not '100'"),
    ('{"checkpoint_at_words": true}', "checkpoint_at_words must be a positive whole number, not True"),
    ('{"checkpoint_at_words": -5}', "checkpoint_at_words must be a positive whole number, not -5"),
    ('{"checkpoint_at_words": 100, "step": "two"}', "step must be a whole number >= 0, not 'two'"),
    ('{"checkpoint_at_words": 200}', "says checkpoint_at_words 200, but its directory is words/100"),
    ('{"checkpoint_at_words": 100000}', "says checkpoint_at_words 100,000, but its directory is words/100"),
])
def test_a_damaged_words_json_is_named_in_one_line(run_dir, tmp_path, capsys, content, message):
    info = run_dir / "words" / "100" / "words.json"
    info.write_bytes(content) if isinstance(content, bytes) else info.write_text(content)
    assert main(["export", "--to-hf", str(run_dir), "--revisions", "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(info) in err and message in err
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("name,words,agrees", [("1M", 1_000_000, True), ("500K", 500_000, True), ("1000K", 1_000_000, True),
                                               ("1500", 1500, True), ("1M", 1000, False), ("2K", 200, False),
                                               ("v1", 1, False), ("01", 1, True)])
def test_a_words_directory_is_named_for_its_count(run_dir, tmp_path, name, words, agrees):
    """The branch chck_NAME is named for the directory, so its name must count the words words.json records."""
    from maskplay.tasks.export.revisions import word_checkpoints

    directory = (run_dir / "words" / "100").rename(run_dir / "words" / name)
    (directory / "words.json").write_text(json.dumps({"checkpoint_at_words": words}))
    if agrees:
        assert [branch for branch, _, _ in word_checkpoints(run_dir)] == [f"chck_{name}"]
        return
    with pytest.raises(ValueError) as found:
        word_checkpoints(run_dir)
    assert str(found.value).startswith(f"{directory / 'words.json'} says checkpoint_at_words {words:,}, but its "
                                       f"directory is words/{name}")


def test_a_words_json_linked_in_from_outside_is_refused(run_dir, tmp_path):
    info = run_dir / "words" / "100" / "words.json"
    outside = tmp_path / "outside.json"
    info.rename(outside)
    info.symlink_to(outside)
    with pytest.raises(ValueError, match=f"{info} is a symbolic link to {outside}, out of"):
        export_revisions(run_dir, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_a_words_directory_without_words_json_is_named(run_dir, tmp_path):
    (run_dir / "words" / "100" / "words.json").unlink()
    with pytest.raises(ValueError, match=r"words/100 has no words.json"):
        export_revisions(run_dir, tmp_path / "hf")
    (run_dir / "words" / "100").rename(run_dir / "words" / "bad name")
    with pytest.raises(ValueError, match="cannot be a branch name"):
        export_revisions(run_dir, tmp_path / "hf")


def test_revisions_without_word_checkpoints_says_so_through_the_cli(gpt_dir, tmp_path):
    """In a subprocess, as a user meets it: one line on stderr, no traceback, exit 2."""
    (tmp_path / "run" / "final").mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    for run, message in [(gpt_dir, "has no final/"), (tmp_path / "run", "has no words/<N>/words.json")]:
        done = subprocess.run([sys.executable, "-m", "maskplay", "export", "--to-hf", str(run), "--revisions",
                               "--out", str(tmp_path / "hf")], capture_output=True, text=True, env=env)
        assert done.returncode == 2 and message in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1


def test_a_malformed_words_json_through_the_cli_is_no_traceback(run_dir, tmp_path):
    (run_dir / "words" / "100" / "words.json").write_text('{"checkpoint_at_words": "x"}')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "maskplay", "export", "--to-hf", str(run_dir), "--revisions",
                           "--out", str(tmp_path / "hf"), "--license", "a: b\n#c"],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "words.json is damaged" in done.stderr
