"""Downloads with the standard library only: resumable (a NAME.part file continued with an HTTP Range request),
checksummed (sha256 and size against a manifest), atomic (renamed into place only when complete and correct),
with progress on stderr (runtime.progress). What fetches models and evaluation data into the cache; no torch.

Offline (MASKPLAY_OFFLINE=1 or HF_HUB_OFFLINE=1, or no answer from the server) is one OfflineError saying what
could not be fetched; the caller adds the command that fetches it."""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import NoReturn

from .files import fsync_dir
from .progress import Progress

OFFLINE_ENVS = ("MASKPLAY_OFFLINE", "HF_HUB_OFFLINE")
CHUNK = 1 << 16
TIMEOUT_S = 60.0


class OfflineError(FileNotFoundError):
    """No network (or told to stay offline): what was wanted cannot be fetched now."""


class ChecksumError(ValueError):
    """A downloaded file is not the one the manifest describes (its partial copy is deleted)."""


def offline() -> bool:
    """Whether the environment asks for no network (MASKPLAY_OFFLINE or HF_HUB_OFFLINE set to 1/true/yes/on)."""
    return any(os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on") for name in OFFLINE_ENVS)


def cache_root() -> Path:
    """maskplay's cache (fetched models and data, the precision probe's measurements): $MASKPLAY_CACHE (or
    $MASKPLAY_CACHE_DIR, its older name), else $XDG_CACHE_HOME/maskplay, else ~/.cache/maskplay."""
    for name in ("MASKPLAY_CACHE", "MASKPLAY_CACHE_DIR"):
        if os.environ.get(name):
            return Path(os.environ[name]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "maskplay"


def source_url(env: str, default: str, plain_suffix: str, **fields: str) -> str:
    """The URL of one file: the template in $env (else `default`) filled with `fields`; a plain base URL in $env
    (no `{`) has `plain_suffix` (a template of the same fields) put under it."""
    template = os.environ.get(env) or default
    if "{" not in template:
        template = template.rstrip("/") + "/" + plain_suffix
    return template.format(**fields)


def _digest(path: Path) -> tuple[hashlib._Hash, int]:
    h, size = hashlib.sha256(), 0
    if path.is_file():
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
                size += len(block)
    return h, size


def download(url: str, target: Path, sha256: str | None, size: int | None, desc: str = "",
             progress: bool = True) -> Path:
    """Fetch `url` into `target` unless it is there already. A partial target.part from an interrupted download
    is continued (HTTP Range; a server that ignores the range restarts it); the complete file must have `size`
    bytes and the sha256 `sha256`, else its part is deleted and ChecksumError says so; then it is renamed to
    `target`. sha256 and size None: a file checked by the caller once it has it (its length then comes from the
    server). No network: OfflineError."""
    target = Path(target)
    if target.is_file():
        return target
    if offline():
        raise OfflineError(f"{url}: offline ({' / '.join(OFFLINE_ENVS)} is set)")
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    h, have = _digest(part)
    if size is None or have > size:  # unknown length (fetched whole), or longer than the file: not a prefix of it
        part.unlink(missing_ok=True)
        h, have = hashlib.sha256(), 0
    if size is None or have < size:
        request = urllib.request.Request(url, headers={"User-Agent": "maskplay"})
        if have:
            request.add_header("Range", f"bytes={have}-")
        try:
            response = urllib.request.urlopen(request, timeout=TIMEOUT_S)
        except urllib.error.HTTPError as err:
            if err.code == 416:  # the part is at least as long as the server's file: not the manifest's file
                _damaged(url, part, f"the server's copy is shorter than {have:,} bytes, expected {size:,}")
            raise FileNotFoundError(f"{url}: HTTP {err.code} {err.reason}") from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise OfflineError(f"{url}: no answer ({reason})") from None
        with response:
            if have and response.status != 206:  # the server sent the whole file: start again
                h, have = hashlib.sha256(), 0
            total = _total(response, have)
            if size is None:
                size = total
            elif total is not None and total != size:
                _damaged(url, part, f"the server's copy has {total:,} bytes, expected {size:,}")
            with open(part, "ab" if have else "wb") as out, \
                    Progress(total=size, initial=have, desc=desc or target.name, unit="B", enabled=progress) as bar:
                try:
                    for block in iter(lambda: response.read(CHUNK), b""):
                        out.write(block)
                        h.update(block)
                        have += len(block)
                        bar.update(len(block))
                except (OSError, http.client.HTTPException):  # the connection dropped: ends short, below
                    pass
                out.flush()
                os.fsync(out.fileno())
        if size is not None and have < size:  # the part stays, and the next call resumes it
            raise OfflineError(f"{url}: interrupted after {have:,} of {size:,} bytes; run the command again to "
                               "resume")
    if (size is not None and have != size) or (sha256 is not None and h.hexdigest() != sha256):
        _damaged(url, part, f"{have:,} bytes, expected {size:,}" if have != size else
                 "its sha256 differs from the manifest's")
    os.replace(part, target)
    fsync_dir(target.parent)
    return target


def _total(response: http.client.HTTPResponse, start: int) -> int | None:
    """The whole file's size as the server gives it: Content-Range's total (206), or start + Content-Length."""
    match = re.fullmatch(r"bytes \d+-\d+/(\d+)", response.headers.get("Content-Range") or "")
    if match:
        return int(match.group(1))
    length = response.headers.get("Content-Length")
    return start + int(length) if length and length.isdigit() else None


def _damaged(url: str, part: Path, what: str) -> NoReturn:
    part.unlink(missing_ok=True)
    raise ChecksumError(f"{url}: the download is damaged ({what}); the partial file was deleted, run the command "
                        "again")
