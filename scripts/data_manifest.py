"""Write src/maskplay/tasks/eval/datasets.json, what `maskplay data fetch` downloads: for each public data set, the
GitHub repository and commit it comes from, and each file's upstream path, its place in the data layout, and the
sha256 and size that are checked. The digests are computed from a data directory in the shared layout
(../shared/data, whose MANIFEST.md says where each file came from): of the file itself when it is the upstream
file verbatim, of its decompressed text when the layout stores it gzipped (blimp-dev, enwiki-wikiextractor), and of
the derived file when it is made from an upstream one (sick: the TRAIN and TRIAL rows of SICK.txt).

    python scripts/data_manifest.py [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "maskplay" / "tasks" / "eval" / "datasets.json"

# name: (folder in the layout, repository, commit, [(upstream path, path in the folder, how)]); how: "copy" (the
# upstream file verbatim), "gzip" (verbatim, stored gzipped), "sick" (derived: tasks/eval/fetch.py, sick_rows)
COLA = "acceptability_corpus/cola_public"
RWSE = ("de.tudarmstadt.ukp.dkpro.spelling-asl/de.tudarmstadt.ukp.dkpro.spelling.experiments.data/src/main/resources/"
        "datasets/en")
SETS = {
    "blimp": ("blimp-dev", "alexwarstadt/blimp", "3e56b06fcabca9b30822fc66435fca6b1aa40bb1", "blimp"),
    "sts": ("stsbenchmark", "amao0o0/SynWMD", "59042a92e862db58bd01e47914345d2f52d2a4a3",
            [(f"data/downstream/STS/STSBenchmark/stsbenchmark/{f}", f, "copy")
             for f in ("sts-train.csv", "sts-dev.csv", "readme.txt", "LICENSE.txt")]),
    "sick": ("sick", "kkalouli/SICK-processing", "0848f4aec60870122a4ca18de08ba0e25f6f9a75",
             [("SICK.txt", "SICK_train_trial.txt", "sick")]),
    "cola": ("cola", "nyu-mll/CoLA-baselines", "dd095d3646ed05a315280aaa8ed4ec84ba435b3e",
             [(f"{COLA}/README", "README", "copy")] +
             [(f"{COLA}/{kind}/{f}", f"{kind}/{f}", "copy") for kind in ("raw", "tokenized")
              for f in ("in_domain_train.tsv", "in_domain_dev.tsv", "out_of_domain_dev.tsv")]),
    "spelling": ("rwse-zesch2012", "UKPLab/spelling-experiments", "5f6a55625dad05963b495ca1bf108a80b7e451ad",
                 [(f"{RWSE}/{f}.txt", f"{f}.txt", "copy") for f in ("en_natural_train", "en_artificial_noun",
                                                                   "en_artificial_token")] +
                 [("de.tudarmstadt.ukp.dkpro.spelling-asl/de.tudarmstadt.ukp.dkpro.spelling.experiments.data/"
                   "LICENSE.txt", "LICENSE.txt", "copy")]),
    "wiki": ("enwiki-wikiextractor", "Vibhas-hs-edu/WikiTasks", "52b1f163137bc40b0f67cbf129d5dab4f6fd5901",
             [(f"text/AA/wiki_{i:02d}", f"wiki_{i:02d}.gz", "gzip") for i in range(64)]),
}


def digest(path: Path, how: str) -> dict:
    data = gzip.decompress(path.read_bytes()) if how == "gzip" else path.read_bytes()
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def build(data: Path) -> dict:
    sets = {}
    for name, (folder, repo, commit, files) in SETS.items():
        if files == "blimp":  # the development half: the paradigms the layout holds
            files = [(f"data/{p.name.removesuffix('.jsonl.gz')}.jsonl", p.name, "gzip")
                     for p in sorted((data / folder).glob("*.jsonl.gz"))]
        sets[name] = {"folder": folder, "repo": repo, "commit": commit,
                      "files": [{"source": src, "path": dst, "how": how, **digest(data / folder / dst, how)}
                                for src, dst, how in files]}
    return {"format": 1, "sets": sets}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    args = parser.parse_args()
    OUT.write_text(json.dumps(build(args.data), indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
