"""Write src/maskplay/assets/models.json from the model directories under src/maskplay/assets: every file's
sha256 and size, each model's family, whether the wheel bundles it, and the Hub revision the files are published
at (https://huggingface.co/maskplay/NAME at that revision). Run it after retraining a model (make bundle-* does)
and publish the changed model's files under a new revision, e.g. with huggingface_hub's command line:

    python scripts/models_manifest.py [--revision v0.2.0]
    hf upload maskplay/NAME src/maskplay/assets/NAME . && hf repos tag create maskplay/NAME v0.2.0
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from maskplay.runtime.files import sha256

ASSETS = Path(__file__).resolve().parents[1] / "src" / "maskplay" / "assets"
# in the wheel (pyproject.toml's exclude-package-data leaves the others out): the quick start's and demo's models
BUNDLED = ("tta-mini-wiki", "gpt-mini-wiki", "unilm-titles-mini")
ORDER = ("tta-mini-wiki", "gpt-mini-wiki", "unilm-titles-mini", "gpt-two-hour", "tta-two-hour", "tta-two-hour-gutenberg")


def build(revision: str) -> dict:
    models = {}
    for name in ORDER:
        directory = ASSETS / name
        files = {f.name: {"sha256": sha256(f), "bytes": f.stat().st_size}
                 for f in sorted(directory.iterdir()) if f.is_file()}
        family = json.loads((directory / "config.json").read_text())["family"]
        models[name] = {"family": family, "bundled": name in BUNDLED, "files": files}
    return {"format": 1, "revision": revision, "models": models}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--revision", default=None, help="the Hub revision (default: the current manifest's)")
    args = parser.parse_args()
    out = ASSETS / "models.json"
    revision = args.revision or json.loads(out.read_text())["revision"]
    out.write_text(json.dumps(build(revision), indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
