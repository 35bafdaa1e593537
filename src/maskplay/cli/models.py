"""`maskplay models list|fetch`: the project's models by name, and where each one is. The package bundles the
three mini models; the others are fetched on first use, or ahead of time with `maskplay models fetch NAME|--all`,
into the cache (~/.cache/maskplay/models; $MASKPLAY_CACHE or $XDG_CACHE_HOME move it). docs/guides/models.md."""

from __future__ import annotations

import argparse

from .summaries import summary


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help=summary("models"), description=__doc__)
    actions = p.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="name, family, size and where each model is (bundled, cached, to fetch)")
    listing.set_defaults(func=run_list)
    fetch = actions.add_parser("fetch", help="download models into the cache (checksummed, resumable)")
    fetch.add_argument("names", nargs="*", metavar="NAME", help="models to fetch (maskplay models list)")
    fetch.add_argument("--all", action="store_true", help="every model (the bundled ones are there already)")
    fetch.set_defaults(func=run_fetch)


def run_list(args: argparse.Namespace) -> int:
    from ..runtime.models import manifest, model_bytes, where

    rows = [(name, entry["family"], f"{model_bytes(name) / 1e6:.1f} MB", *where(name))
            for name, entry in manifest()["models"].items()]
    width = max(len(r[0]) for r in rows)
    print(f"{'name':<{width}}  family  size     where")
    for name, family, size, state, directory in rows:
        print(f"{name:<{width}}  {family:<6}  {size:>7}  {state}" + ("" if state == "to fetch" else f" ({directory})"))
    return 0


def run_fetch(args: argparse.Namespace) -> int:
    from ..runtime.models import fetch_model, model_names, where

    names = model_names() if args.all else args.names
    if not names:
        raise ValueError("name the models to fetch, or --all (maskplay models list shows them)")
    unknown = [n for n in names if n not in model_names()]
    if unknown:
        raise ValueError(f"unknown model {', '.join(unknown)}; the project's models: {', '.join(model_names())}")
    for name in names:
        before = where(name)[0]
        directory = fetch_model(name)
        print(f"{name}: {directory} ({before if before != 'to fetch' else 'fetched'})")
    return 0
