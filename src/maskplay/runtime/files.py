"""File utilities every writer shares: atomic writes (temporary file, fsync, rename), one-writer locks on an
output, checks that an output path can be written, and sha256 digests."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def sha256(path: Path) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks (model manifests and training checkpoints)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_inside(directory: Path, name: object, source: Path) -> Path:
    """directory / name for a file a manifest (`source`) lists, refused in one line unless it stays inside
    `directory`: not absolute, no `..`, no symbolic link that leads out, so that a manifest someone else wrote
    makes maskplay stat or read nothing elsewhere."""
    if not isinstance(name, str) or not name or "\0" in name:
        raise ValueError(f"{source} lists {name!r}: not a file name")
    if Path(name).is_absolute() or ".." in Path(name).parts:
        raise ValueError(f"{source} lists {name!r}: a path outside {directory} (absolute or with ..) is not read")
    if not stays_inside(directory, name):
        raise ValueError(f"{source} lists {name!r}, a symbolic link out of {directory}: not read")
    return directory / name


def model_file(directory: str | Path, name: str) -> Path:
    """directory / name for a file maskplay reads from a model directory by its fixed name (config.json,
    model.safetensors, pytorch_model.bin, tokenizer.json, tokenizer_config.json, vocab.txt, modules.json, ...),
    refused in one line when it is a symbolic link leading out of the directory: the link is followed by reading
    its text (as for the names a manifest lists, file_inside), so nothing outside is opened or even stat-ed. Links
    that stay inside are followed, and so are a HuggingFace cache snapshot's links into its repository's blobs/.
    Call it before anything looks at the file (is_file() would stat the link's target)."""
    directory = Path(directory)
    path = directory / name
    if not stays_inside(directory, name):
        try:
            target = f" to {os.readlink(path)}"
        except OSError:  # the link is a folder of `name` (a module's folder): its own message is enough
            target = ""
        raise ValueError(f"{path} is a symbolic link{target}, out of {directory}: not read (a model directory's "
                         "files must be inside it)")
    return path


def stays_inside(directory: Path, name: str) -> bool:
    """Whether `name`, followed from `directory` one component at a time, stays inside it. Symbolic links are
    read (readlink) and followed by their text, so that nothing outside the directory is ever stat-ed or opened
    (Path.resolve would stat the link's target). A HuggingFace cache snapshot (.../snapshots/REV) links its
    files to ../../blobs: that folder counts as inside too."""
    root = os.path.realpath(directory)
    roots = [root]
    if Path(root).parent.name == "snapshots":
        roots.append(os.path.join(os.path.dirname(os.path.dirname(root)), "blobs"))

    def inside(path: str) -> bool:
        return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)

    current, parts, links = root, list(Path(name).parts), 0
    while parts:
        part = parts.pop(0)
        if part in ("", "."):
            continue
        if part == "..":  # `current` holds no link, so its parent is its text's: nothing to stat
            current = os.path.dirname(current)
            continue
        current = os.path.join(current, part)
        if not inside(current):  # checked before anything at `current` is looked at
            return False
        if not os.path.islink(current):  # each link met is replaced by its text below
            continue
        links += 1
        if links > 40:  # a cycle of links
            return False
        target = os.readlink(current)
        if os.path.isabs(target):  # followed from the root it names, which must be one of `roots` (by its text)
            base = next((r for r in roots if target == r or target.startswith(r.rstrip(os.sep) + os.sep)), None)
            if base is None:
                return False
            current, parts = base, [*Path(target[len(base):].lstrip(os.sep) or ".").parts, *parts]
        else:
            current, parts = os.path.dirname(current), [*Path(target).parts, *parts]
    return inside(current)


def prepare_output_file(path: str | Path, what: str = "--out") -> Path:
    """Check that `path` can be written as a file (it is not a directory, no parent is a file) and create its
    parent directories, so that these mistakes are one-line errors naming the argument."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {path} is a directory; give a file name")
    _check_parents(path, what)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def prepare_output_dir(path: str | Path, what: str = "--out") -> Path:
    """The same for an output directory: it may exist as a directory, not as a file, nor below a file."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what} {path} is a file; give a directory")
    _check_parents(path, what)
    return path


def prepare_new_dir(path: str | Path, what: str = "--out") -> Path:
    """Check, before any work, that `path` can become a new directory: nothing is there yet (a file, a directory,
    empty or not, a dangling link: nothing is mixed into or written over), no parent is a file, and the nearest
    existing parent takes a new entry (tried with an empty directory, removed at once)."""
    path = Path(path)
    if path.exists() or path.is_symlink():
        raise ValueError(f"{what} {path} already exists; choose a new directory")
    _check_parents(path, what)
    parent = next(p for p in path.absolute().parents if p.exists())
    try:
        os.rmdir(tempfile.mkdtemp(prefix=f".{path.name}-", dir=parent))
    except OSError as err:
        raise ValueError(f"{what} {path}: cannot write in {parent} ({err.strerror or err})") from None
    return path


def _check_parents(path: Path, what: str) -> None:
    """The nearest existing parent of `path` must be a directory."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"{what} {path}: {parent} is a file, not a directory")
            break


def read_json_object(path: Path) -> dict:
    """A JSON file that must hold an object; anything else is one error naming the file."""
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is damaged: not readable JSON ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is damaged: a JSON object was expected")
    return data


def replace_directory(out: Path, write: Callable[[Path], None]) -> None:
    """write(tmp) fills a new directory beside `out`, which is then renamed into place: an interrupted run leaves
    no half-written directory under the name asked for."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".tmp-{out.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        write(tmp)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class OutputLock:
    """An exclusive lock on an output file for as long as it is written (filelock, on the hidden file
    .NAME.lock beside it), so that two processes never write the same --out: the second gets a one-line error
    instead of silently overwriting the first's result."""

    def __init__(self, path: str | Path, what: str = "--out") -> None:
        from filelock import FileLock

        self.path, self.what = Path(path), what
        self.lock = FileLock(str(self.path.parent / f".{self.path.name}.lock"), timeout=0)

    def __enter__(self) -> OutputLock:
        from filelock import Timeout

        try:
            self.lock.acquire()
        except Timeout:
            self._check_writable()  # filelock reports a lock file it cannot create (/proc/x) as held by another
            raise ValueError(f"{self.what} {self.path} is being written by another process (it holds "
                             f"{self.lock.lock_file}); wait for it to finish or choose another {self.what}") from None
        return self

    def _check_writable(self) -> None:
        try:
            fd = os.open(self.lock.lock_file, os.O_WRONLY | os.O_CREAT, 0o644)
        except OSError as err:
            raise ValueError(f"{self.what} {self.path}: cannot write in {self.path.parent} "
                             f"({err.strerror or err})") from None
        os.close(fd)

    def __exit__(self, *_: object) -> None:
        self.lock.release()


def _umask() -> int:
    # os.umask can only be read by setting it; put it straight back
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class _atomic_path:
    """Write to a temporary file in the same directory, fsync, then rename over the target. The file gets the
    permissions of any file the user creates (0666 less the umask), not mkstemp's private 0600."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __enter__(self) -> Path:
        if self.target.is_dir():
            raise ValueError(f"{self.target} is a directory; give a file name")
        if not self.target.parent.is_dir():
            prepare_output_file(self.target, what="output")
        fd, name = tempfile.mkstemp(prefix=f".{self.target.name}.", dir=self.target.parent)
        try:
            os.fchmod(fd, 0o666 & ~_umask())
        finally:
            os.close(fd)
        self.tmp = Path(name)
        return self.tmp

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is not None:
            self.tmp.unlink(missing_ok=True)
            return
        try:
            # again here: a writer that recreates the file (safetensors' save_file does) drops the mode set above
            os.chmod(self.tmp, 0o666 & ~_umask())
            with open(self.tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(self.tmp, self.target)
        except OSError as err:  # e.g. the target became a directory meanwhile: leave no temporary file behind
            self.tmp.unlink(missing_ok=True)
            raise ValueError(f"cannot write {self.target}: {err.strerror or err}") from None
        fsync_dir(self.target.parent)


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_path(target: str | Path) -> _atomic_path:
    return _atomic_path(Path(target))
