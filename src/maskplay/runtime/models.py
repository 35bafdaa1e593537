"""The project's own models by name: where each one is (bundled in the package, in the cache, or still to fetch)
and fetching it. The wheel ships the three mini models (the quick start and `make demo` work offline); the other
three would take it past the package index's 100 MB a file, so they are fetched on first use into
cache_root()/models/NAME, checked against models.json (each file's sha256 and size, the Hub revision). A clone keeps
all six under src/maskplay/assets. docs/guides/models.md. No torch here: `maskplay models` stays light."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from .download import OfflineError, cache_root, download, source_url

ASSETS = Path(__file__).resolve().parents[1] / "assets"
MANIFEST = ASSETS / "models.json"
URL_ENV = "MASKPLAY_MODELS_URL"
DEFAULT_URL = "https://huggingface.co/maskplay/{name}/resolve/{revision}/{file}"


@cache
def manifest() -> dict[str, Any]:
    """models.json: {"revision", "models": {NAME: {"family", "bundled", "files": {FILE: {"sha256", "bytes"}}}}}."""
    return json.loads(MANIFEST.read_text())


def model_names() -> list[str]:
    return list(manifest()["models"])


def model_bytes(name: str) -> int:
    return sum(entry["bytes"] for entry in manifest()["models"][name]["files"].values())


def models_dir() -> Path:
    return cache_root() / "models"


def _complete(directory: Path, name: str) -> bool:
    """Every file of the model there, at its size (a download is renamed into place only once checked)."""
    files = manifest()["models"][name]["files"]
    return all((directory / f).is_file() and (directory / f).stat().st_size == e["bytes"] for f, e in files.items())


def where(name: str) -> tuple[str, Path]:
    """("bundled", the package's directory) | ("cached", the cache's) | ("to fetch", where it will go)."""
    if (ASSETS / name / "config.json").is_file():
        return "bundled", ASSETS / name
    cached = models_dir() / name
    return ("cached" if _complete(cached, name) else "to fetch"), cached


def fetch_command(name: str) -> str:
    return f"maskplay models fetch {name}"


def url(name: str, file: str) -> str:
    return source_url(URL_ENV, DEFAULT_URL, "{name}/{file}", name=name, revision=manifest()["revision"], file=file)


def fetch_model(name: str, progress: bool = True) -> Path:
    """The model's directory, fetched into the cache first when neither bundled nor cached; offline, one
    OfflineError that names the command that fetches it."""
    state, directory = where(name)
    if state != "to fetch":
        return directory
    from filelock import FileLock

    entries = manifest()["models"][name]["files"]
    directory.parent.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(str(directory.parent / f".{name}.lock")):  # one download at a time (torchrun's ranks, ...)
            for file, entry in entries.items():
                download(url(name, file), directory / file, entry["sha256"], entry["bytes"], desc=f"{name}/{file}",
                         progress=progress)
    except OfflineError as err:
        raise OfflineError(f"model {name} is not in this installation and could not be fetched ({err}); get it "
                           f"with `{fetch_command(name)}` when online") from None
    return directory


def bundled_model_dir(name: str) -> Path | None:
    """A project model's directory by name (fetched on first use), None for any other name."""
    return fetch_model(name) if name in manifest()["models"] else None
