"""`maskplay data fetch SET`: the public evaluation sets, downloaded from the GitHub repositories and commits they
come from (datasets.json; scripts/data_manifest.py writes it) into the cache (cache_root()/data), in the layout
`maskplay eval` reads (the shared data's: blimp-dev/, stsbenchmark/, sick/, ...). Every file is checked against
its sha256 and size: the upstream file's when it is stored verbatim, its text's when the layout gzips it (blimp,
wiki), the derived file's when it is made from an upstream one (sick). A set is written into FOLDER.part and
renamed when complete, so an interrupted fetch never looks like a data set; run again, it resumes.
No torch here."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from functools import cache
from pathlib import Path
from typing import Any

from ...runtime.download import ChecksumError, OfflineError, cache_root, download, source_url
from ...runtime.files import atomic_path, sha256

MANIFEST = Path(__file__).resolve().parent / "datasets.json"
URL_ENV = "MASKPLAY_DATA_URL"
DEFAULT_URL = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"


@cache
def manifest() -> dict[str, Any]:
    return json.loads(MANIFEST.read_text())


def set_names() -> list[str]:
    return list(manifest()["sets"])


def data_cache() -> Path:
    return cache_root() / "data"


def set_for_folder(folder: str) -> str | None:
    """The set whose folder is `folder` (blimp-dev -> blimp), None when no set provides it."""
    return next((name for name, entry in manifest()["sets"].items() if entry["folder"] == folder), None)


# the folders no set provides: where to get them and how to give them to `maskplay eval` (docs/guides/models.md)
ELSEWHERE = {
    "librispeech-nbest-espnet-hubert30": (
        "download the T-TA paper's LibriSpeech lists from github.com/awslabs/mlm-scoring "
        "(examples/asr-librispeech-espnet/data/dev-clean.am.json and dev-other.am.json) and give both with --file, "
        "or give a folder of dev_clean.jsonl.gz and dev_other.jsonl.gz with --data (its parent with $MASKPLAY_DATA)"),
}


def fetch_command(folder: str) -> str | None:
    name = set_for_folder(folder)
    return f"maskplay data fetch {name}" if name else None


def url(entry: dict[str, Any], source: str) -> str:
    return source_url(URL_ENV, DEFAULT_URL, "{repo}/{commit}/{path}", repo=entry["repo"], commit=entry["commit"],
                      path=source)


def sick_rows(text: str) -> str:
    """SICK.txt -> SICK_train_trial.txt: lines split on CRLF or LF, empty ones dropped, each cell stripped; the
    header and the TRAIN and TRIAL rows (its SemEval_set column), in file order, LF-terminated."""
    rows = [[cell.strip() for cell in line.split("\t")] for line in text.replace("\r\n", "\n").split("\n") if line]
    keep = [rows[0]] + [row for row in rows[1:] if row[-1] in ("TRAIN", "TRIAL")]
    return "".join("\t".join(row) + "\n" for row in keep)


def _place(raw: Path, file: dict[str, Any], target: Path) -> None:
    """The downloaded upstream file `raw` into the layout: copied, gzipped, or the SICK rows taken from it."""
    with atomic_path(target) as tmp:
        if file["how"] == "gzip":
            with open(raw, "rb") as src, gzip.GzipFile(tmp, "wb", compresslevel=9, mtime=0) as out:
                shutil.copyfileobj(src, out)
        elif file["how"] == "sick":
            text = sick_rows(raw.read_text(encoding="utf-8"))
            tmp.write_bytes(text.encode("utf-8"))
            if (len(text.encode("utf-8")), sha256(tmp)) != (file["bytes"], file["sha256"]):
                raise ChecksumError(f"{target}: the rows taken from {file['source']} differ from the published "
                                    "set's (sha256); nothing was written")
        else:
            shutil.copyfile(raw, tmp)
    raw.unlink()


def fetch_set(name: str, progress: bool = True) -> Path:
    """The set's folder in the cache, downloaded first when missing; offline, one OfflineError naming the command."""
    from filelock import FileLock

    entry = manifest()["sets"][name]
    final = data_cache() / entry["folder"]
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final.parent / f".{entry['folder']}.lock")):  # one fetch of a set at a time
        return final if final.is_dir() else _fetch_into(name, entry, final, progress)


def _fetch_into(name: str, entry: dict[str, Any], final: Path, progress: bool) -> Path:
    work = final.with_name(final.name + ".part")
    try:
        for file in entry["files"]:
            target = work / file["path"]
            if target.is_file():
                continue
            raw = work / ".upstream" / file["path"]
            checked = file["how"] != "sick"  # SICK.txt is checked through the rows taken from it
            download(url(entry, file["source"]), raw, file["sha256"] if checked else None,
                     file["bytes"] if checked else None, desc=f"{name}: {file['path']}", progress=progress)
            target.parent.mkdir(parents=True, exist_ok=True)
            _place(raw, file, target)
    except OfflineError as err:
        raise OfflineError(f"data set {name} could not be fetched ({err}); run `maskplay data fetch {name}` when "
                           "online") from None
    shutil.rmtree(work / ".upstream", ignore_errors=True)
    os.replace(work, final)
    return final
