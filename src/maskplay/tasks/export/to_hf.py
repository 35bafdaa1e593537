"""`maskplay export --to-hf MODEL --out DIR` (export_to_hf; hf.py builds the files). An ELECTRA model leaves as its
two towers, each exported as any model is (the twin where it can express it, else custom code). The discriminator
goes to --out: the twin ElectraForPreTraining (AutoModel gives its hidden states, AutoModelForSequenceClassification
fine-tunes it), or custom code for AutoModel alone (the standalone file has no replaced-token head). The generator, a
BERT-style masked LM, goes to --generator-out, or by default into out/generator
(`AutoModelForMaskedLM.from_pretrained(DIR, subfolder="generator")`): the twin ElectraForMaskedLM, or custom code's
MaskplayForMaskedLM."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import Tensor

from ...runtime.files import replace_directory
from .hf import _check_out, _load, model_export, write_export, write_into

if TYPE_CHECKING:
    from ...data.tokenizer import Tokenizer
    from ...families import MaskplayModel

SUBFOLDER = "generator"


def export_to_hf(model_dir: str | Path, out: str | Path, custom_code: bool = False, license: str = "other",
                 datasets: list[str] | None = None, generator_out: str | Path | None = None) -> list[str]:
    """Write the HuggingFace directory of the maskplay model `model_dir` (a directory or a bundled model's name) to
    `out` (an ELECTRA model: its discriminator, its generator to `generator_out` or out/generator: export_towers);
    returns what to tell the user."""
    out = Path(out)
    _check_out(out)
    if generator_out is not None:
        _check_separate(out, Path(generator_out))
    card = {"license": license, "datasets": datasets}
    source, model, tokenizer = _load(model_dir)
    if model.parts:
        return export_towers(source, model, tokenizer, out, generator_out, custom_code, card)
    if generator_out is not None:
        raise ValueError(f"--generator-out goes with an ELECTRA model; {source} holds a {model.config.family!r} model")
    files, weights, notes = model_export(source, model, tokenizer, out.name, custom_code, card)
    write_export(out, files, weights)
    return [f"wrote {out}: {notes[0]}", *notes[1:]]


def _check_separate(out: Path, generator_out: Path) -> None:
    """--generator-out: a new directory, apart from --out (one inside the other would be written into the other)."""
    _check_out(generator_out, "--generator-out")
    a, b = out.resolve(), generator_out.resolve()
    if a == b or a.is_relative_to(b) or b.is_relative_to(a):
        raise ValueError("--out and --generator-out must be separate directories, neither inside the other")


Export = tuple[dict[str, str], dict[str, Tensor], list[str]]  # model_export's (text files, weights, notes)


def tower_exports(source: Path, model: MaskplayModel, tokenizer: Tokenizer | None, name: str, generator_name: str,
                  custom_code: bool, card: dict[str, Any]) -> tuple[Export, Export | None]:
    """The exports of an ELECTRA model's discriminator and generator (None: electra.generator = false)."""
    try:
        generator = model.standalone("generator")
    except ValueError:  # electra.generator = false: the discriminator alone
        generator = None
    disc = model_export(source, model.standalone("discriminator"), tokenizer, name, custom_code, card)
    gen = None if generator is None else model_export(source, generator, tokenizer, generator_name, custom_code, card)
    return disc, gen


def write_towers(directory: Path, disc: Export, gen: Export | None) -> None:
    """Both towers into the existing `directory`: the discriminator in it, the generator in its SUBFOLDER."""
    write_into(directory, disc[0], disc[1])
    if gen is not None:
        (directory / SUBFOLDER).mkdir()
        write_into(directory / SUBFOLDER, gen[0], gen[1])


def export_towers(source: Path, model: MaskplayModel, tokenizer: Tokenizer | None, out: Path,
                  generator_out: str | Path | None, custom_code: bool, card: dict[str, Any]) -> list[str]:
    """The discriminator to `out`, the generator (if the model has one) to `generator_out` or out/generator."""
    separate = Path(generator_out) if generator_out is not None else None
    if separate is not None:
        _check_separate(out, separate)
    name = separate.name if separate is not None else f"{out.name}/{SUBFOLDER}"
    disc, gen = tower_exports(source, model, tokenizer, out.name, name, custom_code, card)
    if gen is None and separate is not None:
        raise ValueError(f"{source} has no generator (electra.generator = false) to write to --generator-out")
    if gen is not None and separate is not None:
        replace_directory(separate, lambda tmp: (tmp.mkdir(parents=True), write_into(tmp, gen[0], gen[1])))

    def write(tmp: Path) -> None:
        tmp.mkdir(parents=True)
        write_towers(tmp, disc, None if separate is not None else gen)

    replace_directory(out, write)
    lines = [f"wrote {out}: the discriminator, {disc[2][0]}", *disc[2][1:]]
    if gen is not None:
        where = separate if separate is not None else out / SUBFOLDER
        lines += [f"wrote {where}: the generator, {gen[2][0]}", *gen[2][1:]]
    return lines
