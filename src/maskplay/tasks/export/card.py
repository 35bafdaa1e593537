"""README.md of an export, with the metadata block the HuggingFace Hub reads (library, tags, license, datasets,
pipeline tag, the dev results of maskplay's own model card), so that uploading the directory is all that is left."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from ...runtime.files import model_file

PIPELINES = {"AutoModelForCausalLM": "text-generation", "AutoModelForMaskedLM": "fill-mask",
             "AutoModel": "feature-extraction"}
# what a model card copied into an export loses: control characters but tab and newline
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}  # plain, YAML reads these as no string


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
                value = float(cells[1].replace(",", ""))
            except ValueError:
                continue
            if math.isfinite(value):  # nan / inf: no number the Hub's metrics can show
                rows.append((cells[0], value))
    return rows


def yaml_string(text: str) -> str:
    """`text` as a YAML double-quoted scalar that reads back as `text` whatever it holds (a newline, `: `, `#`,
    `---`, a quote, a control character): JSON's escaping, which YAML reads, plus \\u escapes for the characters
    JSON leaves raw that YAML may not hold raw or reads as line breaks (DEL, C1 controls, U+2028/2029, U+FFFE/FFFF).
    A lone surrogate (undecodable bytes) cannot be written as UTF-8 at all: it becomes U+FFFD."""
    quoted = json.dumps(text, ensure_ascii=False)
    return "".join(_escaped(c) for c in quoted)


def _identifier(text: str) -> str:
    """A Hub identifier ("mit", "apache-2.0", "other") plain, as the Hub writes it; any other text quoted."""
    plain = re.fullmatch(r"[a-z][a-z0-9.-]*", text) and text not in YAML_WORDS
    return text if plain else yaml_string(text)


def _escaped(c: str) -> str:
    code = ord(c)
    if 0xD800 <= code <= 0xDFFF:
        return "\ufffd"
    if 0x7F <= code <= 0x9F or code in (0x2028, 0x2029, 0xFFFE, 0xFFFF):
        return f"\\u{code:04x}"
    return c


def metadata_block(name: str, family: str, kind: str, license: str, datasets: list[str],
                   results: list[tuple[str, float]], library: str = "transformers", custom: bool = True) -> str:
    """The YAML front matter: `kind` is the main Auto class ("AutoModelForCausalLM", ...)."""
    tags = ["maskplay", family] + (["custom_code"] if custom else []) + (
        ["sentence-transformers", "sentence-similarity"] if library == "sentence-transformers" else [])
    lines = ["---", f"library_name: {library}", "tags:", *(f"- {t}" for t in tags), f"license: {_identifier(license)}",
             f"pipeline_tag: {'sentence-similarity' if library == 'sentence-transformers' else PIPELINES[kind]}"]
    if datasets:
        lines += ["datasets:", *(f"- {yaml_string(d)}" for d in datasets)]
    if results:
        lines += ["model-index:", f"- name: {yaml_string(name)}", "  results:", "  - task:",
                  f"      type: {PIPELINES[kind]}", "    dataset:", "      name: maskplay dev sets",
                  "      type: maskplay-dev", "    metrics:"]
        for metric, value in results:
            lines += [f"    - name: {yaml_string(metric)}", "      type: dev", f"      value: {value}"]
    return "\n".join(lines + ["---", ""])


def model_card(source: Path, name: str, family: str, kind: str, how: str, license: str = "other",
               datasets: list[str] | None = None, library: str = "transformers", custom: bool = True) -> str:
    """The whole README.md: metadata, how to load it (`how`: a code block), and maskplay's own card below."""
    own = _own_card(model_file(source, "README.md"))
    head = metadata_block(name, family, kind, license, datasets or [], dev_results(own), library, custom)
    body = [f"# {name}", "", f"A maskplay `{family}` model exported for HuggingFace (`maskplay export`).", "", how, ""]
    if own:
        body += ["## maskplay's model card", "", re.sub(r"^# ", "### ", own, flags=re.M).replace("\n## ", "\n#### ")]
    return head + "\n".join(body).rstrip() + "\n"


def _own_card(path: Path) -> str:
    """maskplay's card of the model, its control characters (but tab and newline) dropped: the export's card is
    text for the Hub to show."""
    if not path.is_file():
        return ""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not UTF-8 text (byte {err.start}): fix or remove the model's card") from None
    return CONTROL.sub("", text)



def loading_example(directory: str, kind: str, custom: bool, frame: tuple[str, str] | None) -> str:
    """A code block loading the export; `frame` (prefix, suffix: token names), for a model that generates, is how
    maskplay frames a prompt (the tokenizer's own framing, `[SOS] ... [EOS]`, is a whole sentence's)."""
    trust = ", trust_remote_code=True" if custom else ""
    code = ["```python", "import torch", f"from transformers import AutoTokenizer, {kind}", "",
            f"tokenizer = AutoTokenizer.from_pretrained({json.dumps(directory)}{trust})",
            f"model = {kind}.from_pretrained({json.dumps(directory)}{trust})"]
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
