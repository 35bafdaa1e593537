"""README.md of an export, with the metadata block the HuggingFace Hub reads (library, tags, license, datasets,
pipeline tag, the dev results of maskplay's own model card), so that uploading the directory is all that is left."""

from __future__ import annotations

import re
from pathlib import Path

PIPELINES = {"AutoModelForCausalLM": "text-generation", "AutoModelForMaskedLM": "fill-mask",
             "AutoModel": "feature-extraction"}


def dev_results(card: str) -> list[tuple[str, float]]:
    """(metric, value) for each row of the "Dev results" table of a maskplay model card (`| metric | value |
    source |`)."""
    section = re.split(r"^## Dev results\s*$", card, maxsplit=1, flags=re.M)
    if len(section) < 2:
        return []
    rows = []
    for line in section[1].split("\n## ")[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0] not in ("metric", "") and not set(cells[0]) <= set("-: "):
            try:
                rows.append((cells[0], float(cells[1].replace(",", ""))))
            except ValueError:
                continue
    return rows


def _yaml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def metadata_block(name: str, family: str, kind: str, license: str, datasets: list[str],
                   results: list[tuple[str, float]], library: str = "transformers", custom: bool = True) -> str:
    """The YAML front matter: `kind` is the main Auto class ("AutoModelForCausalLM", ...)."""
    tags = ["maskplay", family] + (["custom_code"] if custom else []) + (
        ["sentence-transformers", "sentence-similarity"] if library == "sentence-transformers" else [])
    lines = ["---", f"library_name: {library}", "tags:", *(f"- {t}" for t in tags), f"license: {license}",
             f"pipeline_tag: {'sentence-similarity' if library == 'sentence-transformers' else PIPELINES[kind]}"]
    if datasets:
        lines += ["datasets:", *(f"- {_yaml_string(d)}" for d in datasets)]
    if results:
        lines += ["model-index:", f"- name: {_yaml_string(name)}", "  results:", "  - task:",
                  f"      type: {PIPELINES[kind]}", "    dataset:", "      name: maskplay dev sets",
                  "      type: maskplay-dev", "    metrics:"]
        for metric, value in results:
            lines += [f"    - name: {_yaml_string(metric)}", "      type: dev", f"      value: {value}"]
    return "\n".join(lines + ["---", ""])


def model_card(source: Path, name: str, family: str, kind: str, how: str, license: str = "other",
               datasets: list[str] | None = None, library: str = "transformers", custom: bool = True) -> str:
    """The whole README.md: metadata, how to load it (`how`: a code block), and maskplay's own card below."""
    own = (source / "README.md").read_text(encoding="utf-8") if (source / "README.md").is_file() else ""
    head = metadata_block(name, family, kind, license, datasets or [], dev_results(own), library, custom)
    body = [f"# {name}", "", f"A maskplay `{family}` model exported for HuggingFace (`maskplay export`).", "", how, ""]
    if own:
        body += ["## maskplay's model card", "", re.sub(r"^# ", "### ", own, flags=re.M).replace("\n## ", "\n#### ")]
    return head + "\n".join(body).rstrip() + "\n"


def loading_example(directory: str, kind: str, custom: bool, frame: tuple[str, str] | None) -> str:
    """A code block loading the export; `frame` (prefix, suffix: token names), for a model that generates, is how
    maskplay frames a prompt (the tokenizer's own framing, `[SOS] ... [EOS]`, is a whole sentence's)."""
    trust = ", trust_remote_code=True" if custom else ""
    code = ["```python", "import torch", f"from transformers import AutoTokenizer, {kind}", "",
            f'tokenizer = AutoTokenizer.from_pretrained("{directory}"{trust})',
            f'model = {kind}.from_pretrained("{directory}"{trust})']
    if frame is None:
        code += ['batch = tokenizer(["the cat sat on the mat"], return_tensors="pt")  # framed as maskplay frames it',
                 "out = model(**batch)"]
    else:
        prefix, suffix = frame
        code += [f'prefix, suffix = "{prefix}", "{suffix}"  # maskplay\'s prompt frame',
                 'ids = tokenizer.convert_tokens_to_ids(prefix.split()) + tokenizer("the cat sat", '
                 'add_special_tokens=False).input_ids + tokenizer.convert_tokens_to_ids(suffix.split())',
                 "out = model.generate(torch.tensor([ids]), max_new_tokens=20, do_sample=False)"]
    return "\n".join(code + ["```"])
