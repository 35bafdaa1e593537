"""The documentation checks of `make test` (CONTRIBUTING.md, "How the docs are checked"): the generated reference
pages (docs/reference/) equal what scripts/docs/reference.py writes from the code now, every relative link and
#anchor of every Markdown file resolves (scripts/docs/check_links.py), and the user-facing pages say nothing about
how the project was built. The checkers themselves are tested against hand-made pages with known answers."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"docs_{name}", ROOT / "scripts" / "docs" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


reference = load("reference")
check_links = load("check_links")


def test_reference_pages_are_current() -> None:
    stale = reference.stale_pages()
    assert not stale, (f"{', '.join(str(p.relative_to(ROOT)) for p in stale)} differ from what the code gives: "
                       f"run `{reference.REGENERATE}` and commit the pages")


def test_cli_page_lists_every_command_and_option() -> None:
    """An oracle independent of the page writer's walk: every subcommand path and option string argparse knows."""
    import argparse

    from maskplay.cli import build_parser

    page = reference.cli_page()
    todo = [("maskplay", build_parser())]
    while todo:
        path, parser = todo.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [(f"{path} {name}", sub) for name, sub in action.choices.items()]
            elif action.option_strings and path != "maskplay" and action.dest != "help":
                assert f"`{action.option_strings[0]}`" in page, (path, action.option_strings)
        assert path == "maskplay" or f"`{path}`" in page, path


def test_config_page_lists_every_key() -> None:
    import dataclasses

    from maskplay.registry import family_sections
    from maskplay.tasks.train.config import TrainConfig

    page = reference.config_page()
    for section in dataclasses.fields(TrainConfig):
        cls = section.default_factory().__class__  # type: ignore[misc]
        assert f"## `[{section.name}]`" in page
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(f.default_factory) if callable(f.default_factory) else False:
                assert f"## `[{section.name}.{f.name}]`" in page  # a table of its own: [model.long]
            elif f.name != "sections":
                assert f"| `{f.name}` |" in page, (section.name, f.name)
    for name in family_sections():
        assert f"## `[model.{name}]`" in page
    assert "## `[model.long]`" in page


@dataclass
class _Commented:
    """A toy config section."""

    # above a, first line
    # above a, second line
    a: int = 1  # a's own
    b: str = "x"  # one comment for b and b_extra
    b_extra: bool = False
    c: float = 0.5
    # a list
    d: list[int] | None = None


def test_field_comments() -> None:
    assert reference.field_comments(_Commented) == {
        "a": "above a, first line above a, second line a's own", "b": "one comment for b and b_extra",
        "b_extra": "see `b`", "c": "", "d": "a list"}


def test_slugs_follow_github() -> None:
    # headings of this repository's pages and the anchors GitHub gives them
    cases = {"6. Fine-tuning every family on CoLA and STS-B": "6-fine-tuning-every-family-on-cola-and-sts-b",
             "`maskplay score`": "maskplay-score", "From minicons and mlm-scoring": "from-minicons-and-mlm-scoring",
             "Reversible layers (`reversible`)": "reversible-layers-reversible",
             "GPT-BERT's recipe pieces": "gpt-berts-recipe-pieces", "T-TA, BERT & GPT: [a link](x.md)":
             "t-ta-bert--gpt-a-link", "snake_case stays": "snake_case-stays"}
    assert {h: check_links.slug(h) for h in cases} == cases


def test_link_checker_finds_what_is_broken(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "other.md").write_text("# Other page\n\n## Part\n\n## Part\n\n<a name=\"here\"></a>\n")
    (tmp_path / "pic.png").write_bytes(b"")
    page = tmp_path / "page.md"
    page.write_text("\n".join([
        "# Title",
        "[fine](sub/other.md#part) [repeat](sub/other.md#part-1) [named](sub/other.md#here) ![pic](pic.png)",
        "[missing file](nowhere.md) [bad anchor](sub/other.md#part-2) [self](#title) [self bad](#nope)",
        "[site](https://example.org/none) `[in code](nowhere-either.md)`",
        "```",
        "[in a fence](not-checked.md)",
        "```",
        "[ref]: sub/gone.md",
        '<img src="gone.png">',
    ]) + "\n")
    problems = check_links.check_file(page)
    assert [p.split(": ", 1)[1].split(":")[0] for p in problems] == [
        "nowhere.md", "sub/other.md#part-2", "#nope", "sub/gone.md", "gone.png"], problems
    assert all(p.startswith(f"{page}:") for p in problems)


def test_link_checker_finds_missing_repository_paths_in_code(tmp_path: Path) -> None:
    """A repository path written as code must name a file; outputs of a command and placeholders are left alone.
    A link out of the repository is broken too."""
    root = tmp_path / "repo"
    for name in ("scripts/real.py", "results/study/real.json", "docs/results/real.png", "README.md", "../outside.md"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    page = root / "docs" / "page.md"
    page.write_text("\n".join([
        "# Title",  # 1
        "Run `scripts/real.py` and read `results/study/real.json`, `README.md`, `docs/results/real.png`.",
        "The made-up `results/no-such-study/made-up.json` and `benchmarks/probes/gone.py` are missing.",  # 3
        "Prose results/not-code.json is not checked; a folder `results/study/` and `src/maskplay` have no extension.",
        "",
        "```bash",
        "python scripts/real.py --out results/new/out.json --plot docs/results/new.png -o results/o.json",  # 7
        "python scripts/missing.py --out=results/new2.json > results/new.log >>results/new2.log",  # 8
        "python scripts/real.py results/NAME.json results/*.json results/<name>.json results/x-$p.json",  # 9
        "cat runs/results/x.json $OUT/results/y.json configs/missing.toml",  # 10
        "```",
        "",
        "    python benchmarks/indented-missing.py",  # 13
        "",
        "[a design note](../../outside.md) [inside](../README.md)",  # 15
    ]) + "\n")
    problems = check_links.check_file(page, root=root)
    assert [p.split(": ", 1)[0].rsplit(":", 1)[1] + " " + p.split(": ", 2)[1] for p in problems] == [
        "15 ../../outside.md", "3 results/no-such-study/made-up.json", "3 benchmarks/probes/gone.py",
        "8 scripts/missing.py", "10 configs/missing.toml", "13 benchmarks/indented-missing.py"], problems
    assert "outside the repository" in problems[0] and "no such file in the repository" in problems[1]


def test_every_markdown_link_resolves() -> None:
    """All broken links at once, one per line (python scripts/docs/check_links.py lists the same)."""
    problems = [p for f in check_links.markdown_files() for p in check_links.check_file(f)]
    assert not problems, "broken links:\n" + "\n".join(problems)


# the user-facing pages this check covers; texts about how the project was built belong in git history. Stricter
# than tests/test_no_build_notes.py's check of every tracked file: any "session", a home directory, and pages not yet
# added to git. "/wor[k]/" matches the machine path without writing it, which that check would flag here.
USER_PAGES = ("README.md", "CONTRIBUTING.md", "ARCHITECTURE.md", "docs/README.md", "docs/guides", "docs/reference")
BUILD_WORDS = re.compile(r"\bsessions?\b|\bissues? \d|\bturns? \d|\bthe house\b|\bseeds? 00\d|/wor[k]/|/home/\w",
                         re.IGNORECASE)


def user_pages() -> list[str]:
    try:
        return subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *USER_PAGES],
                              cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an sdist): the files themselves
        return [str(p.relative_to(ROOT)) for name in USER_PAGES
                for p in ([ROOT / name] if (ROOT / name).is_file() else sorted((ROOT / name).rglob("*.md")))]


def test_user_pages_do_not_narrate_how_the_project_was_built() -> None:
    tracked = user_pages()
    assert "README.md" in tracked and "docs/guides/scoring.md" in tracked
    hits = [f"{name}:{n}: {line.strip()[:100]}" for name in tracked if name.endswith(".md")
            for n, line in enumerate((ROOT / name).read_text(encoding="utf-8").splitlines(), 1)
            if BUILD_WORDS.search(line)]
    assert not hits, "pages that narrate the project's building (say it with a date or a commit id):\n" + \
        "\n".join(hits)
