"""What every evaluation shares: where the data lives, correlation and MCC metrics, threshold tuning, and
writing results."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats
from sklearn.metrics import matthews_corrcoef

from ...runtime.files import atomic_path

DATA_ENV = "MASKPLAY_DATA"
REPO = Path(__file__).resolve().parents[4]  # src/maskplay/tasks/eval -> the repository, in a clone


def data_roots() -> list[Path]:
    """Where the data sets are searched, in order: $MASKPLAY_DATA, ../shared/data next to the repository when
    maskplay runs from a clone, ../shared/data from the working directory, then the cache that `maskplay data
    fetch` fills (fetch.py)."""
    from .fetch import data_cache

    roots = []
    if os.environ.get(DATA_ENV):
        root = Path(os.environ[DATA_ENV])
        if not root.is_dir():
            raise FileNotFoundError(f"${DATA_ENV}={root} is not a directory")
        roots.append(root)
    if (REPO / "pyproject.toml").is_file() and (REPO / "src" / "maskplay").is_dir():
        roots.append(REPO.parent / "shared" / "data")
    roots += [Path.cwd().parent / "shared" / "data", data_cache()]
    return list(dict.fromkeys(roots))


def find_data(*default: str) -> Path:
    """The first data_roots()/default that exists; else one FileNotFoundError naming the places searched and the
    command that fetches the set."""
    from .fetch import ELSEWHERE, fetch_command

    roots = data_roots()
    for root in roots:
        if root.joinpath(*default).exists():
            return root.joinpath(*default)
    missing = f"{'/'.join(default)} not found (searched {', '.join(map(str, roots))})"
    if default and default[0] in ELSEWHERE:  # a set no command fetches: where it comes from
        raise FileNotFoundError(f"{missing}: no command fetches it; {ELSEWHERE[default[0]]} (docs/guides/models.md)")
    command = fetch_command(default[0]) if default else None
    how = f"get it with `{command}`" if command else "no command fetches it (docs/guides/models.md)"
    raise FileNotFoundError(f"{missing}: {how}, or give its path (--data / --file), or set ${DATA_ENV}")


def data_root() -> Path:
    """The first of data_roots() that exists (a directory in the shared layout)."""
    roots = data_roots()
    for root in roots:
        if root.is_dir():
            return root
    raise FileNotFoundError(f"no data directory: set ${DATA_ENV} or pass --data, or fetch a set with `maskplay data "
                            f"fetch` (looked in {', '.join(map(str, roots))})")


def data_path(given: str | Path | None, *default: str) -> Path:
    """The given path, else the default searched under data_roots() (find_data). A name with a suffix (x.csv,
    x.jsonl.gz) must be a file and one without a directory: the other kind is an error naming it, not an
    IsADirectoryError later."""
    path = Path(given) if given is not None else find_data(*default)
    if not path.exists():
        raise FileNotFoundError(f"{path} not found")
    want_file = bool(Path(*default).suffix if default else path.suffix)
    if want_file and path.is_dir():
        raise ValueError(f"{path} is a directory; a data file was expected there")
    if not want_file and not path.is_dir():
        raise ValueError(f"{path} is a file; a data directory was expected there")
    return path


# ---- metrics -----------------------------------------------------------------------------------------

def _pair(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 2:
        raise ValueError(f"a correlation needs two 1-D arrays of the same length >= 2, got {x.shape} and {y.shape}")
    return x, y


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """scipy.stats.pearsonr; nan when either side is constant (callers check that first)."""
    x, y = _pair(x, y)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(stats.pearsonr(x, y).statistic)


def rankdata(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties sharing their average rank (scipy.stats.rankdata)."""
    return stats.rankdata(np.asarray(x, dtype=np.float64), method="average")


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """scipy.stats.spearmanr (Pearson of the average ranks); nan when either side is constant."""
    x, y = _pair(x, y)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(stats.spearmanr(x, y).statistic)


def matthews(predicted: np.ndarray, gold: np.ndarray) -> float:
    """Matthews correlation of two boolean arrays (sklearn.metrics.matthews_corrcoef): 0 when it is undefined
    (a constant prediction)."""
    p, g = np.asarray(predicted, dtype=bool), np.asarray(gold, dtype=bool)
    return float(matthews_corrcoef(g, p))


def candidate_thresholds(values: np.ndarray) -> np.ndarray:
    """-inf, then midpoints between consecutive distinct values, then +inf: every distinct split."""
    v = np.unique(np.asarray(values, dtype=np.float64))
    return np.concatenate([[-np.inf], (v[1:] + v[:-1]) / 2, [np.inf]])


# ---- results -----------------------------------------------------------------------------------------

def write_results(path: str | Path | None, result: dict[str, Any]) -> None:
    if path is None:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(_finite(result), indent=2, ensure_ascii=False, default=_jsonable, allow_nan=False)
                       + "\n")
    print(f"wrote {path}")


def _finite(value: Any) -> Any:
    """Strict JSON has no Infinity/NaN: write them as the strings "inf", "-inf", "nan" (a threshold of -inf
    means "always flag")."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, (float, np.floating)) and not math.isfinite(value):
        return str(float(value))
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def check_limit(limit: int | None) -> None:
    if limit is not None and limit < 1:
        raise ValueError(f"--limit must be at least 1, got {limit}")


def limit_rows(rows: list[Any], limit: int | None) -> list[Any]:
    check_limit(limit)
    return rows if limit is None else rows[:limit]
