"""Property tests (Hypothesis) over the text reader, the WordPiece tokenizer, the config loaders and the option
parser: on any input, the only exception is a documented one-line error (ValueError / FileNotFoundError, or
argparse's ArgumentTypeError for an option), and what is accepted is what the docs say. Each property runs twice:
a quick run (QUICK examples, derandomized: the same examples every time) and a slow-marked long run (LONG = 10,000
examples, new ones each time) that `make fuzz` runs (MASKPLAY_FUZZ_LONG=1; skipped otherwise).
docs/reference/errors.md states the properties."""

from __future__ import annotations

import argparse
import json
import math
import os
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

QUICK, LONG = 150, 10_000
# The long runs take longer than `make test`'s budget allows (docs/reference/errors.md): `make fuzz` runs them.
LONG_RUN = pytest.mark.skipif(not os.environ.get("MASKPLAY_FUZZ_LONG"),
                              reason="the 10,000-example runs: `make fuzz` (MASKPLAY_FUZZ_LONG=1)")


def fuzz(**strategies: st.SearchStrategy) -> Callable[[Callable], tuple[Callable, Callable]]:
    """The property as (quick test, slow long test)."""
    def wrap(check: Callable) -> tuple[Callable, Callable]:
        common = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
        quick = settings(max_examples=QUICK, derandomize=True, **common)(given(**strategies)(check))
        long = LONG_RUN(pytest.mark.slow(settings(max_examples=LONG, **common)(given(**strategies)(check))))
        return quick, long
    return wrap


def one_line(err: BaseException) -> str:
    message = str(err)
    assert message and len(message.splitlines()) == 1 and "Traceback" not in message, repr(message)
    return message


# ---- the reader (maskplay.data.source) ---------------------------------------------------------------------

TEXTY = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=200).map(lambda t: t.encode("utf-8")),
    st.lists(st.sampled_from([b"a", b" ", b"\n", b"\r\n", b"\t", b"\x00", b"\xff", b"\xc3", b"\xe2\x80\xa8", b"\xef\xbb\xbf",
                              b"\x1f\x8b", b"\"", b",", "é".encode()]), max_size=60).map(b"".join),
)


def _check_decode(data: bytes) -> None:
    from maskplay.data.source import decode, split_lines

    try:
        text = decode(data, "f.txt")
    except ValueError as err:
        message = one_line(err)
        assert message.startswith("f.txt:") and ("invalid UTF-8 at byte offset" in message or "NUL byte" in message)
        line = int(message.split(":")[1])
        body = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
        assert 1 <= line <= body.count(b"\n") + 1
        assert b"\x00" in data or not _is_utf8(body)  # refused only for a reason
        return
    body = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    assert text == body.decode("utf-8") and "\x00" not in text
    lines = split_lines(text)
    # lines on \n only: U+2028, U+0085, \x0c, \r alone stay inside their line; rejoining gives the text back
    expected = text.split("\n")
    if expected[-1] == "":
        expected.pop()
    assert lines == [row.removesuffix("\r") for row in expected]
    assert len(lines) == text.count("\n") + (0 if text.endswith("\n") or not text else 1)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


test_reader_decodes_or_names_file_and_line, test_reader_decodes_or_names_file_and_line_long = \
    fuzz(data=TEXTY)(_check_decode)


def _check_read_examples(data: bytes) -> None:
    """finetune/predict's reader on any bytes: examples, or a one-line error naming the file."""
    import tempfile

    from maskplay.tasks.finetune import read_examples

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.tsv"
        path.write_bytes(data)
        for need_labels in (True, False):
            try:
                examples = read_examples(path, need_labels=need_labels)
            except ValueError as err:
                assert str(path) in one_line(err)
                continue
            assert examples and all(isinstance(ex.text, str) and "\x00" not in ex.text for ex in examples)


ROWS = st.lists(st.tuples(st.text(max_size=30), st.sampled_from(["0", "1", "2.5", "", "x"])), max_size=8)
TSV = st.one_of(TEXTY, ROWS.map(lambda rows: ("sentence\tlabel\n" + "".join(f"{a}\t{b}\n" for a, b in rows)).encode(
    "utf-8", "surrogatepass")), ROWS.map(lambda rows: ("text\n" + "".join(f"{json.dumps(a)}\n" for a, _ in rows)).encode(
    "utf-8", "surrogatepass")))
test_examples_reader_refuses_in_one_line, test_examples_reader_refuses_in_one_line_long = \
    fuzz(data=TSV)(_check_read_examples)


def _check_corpus(data: bytes, fmt: str) -> None:
    """prepare's / tokenizer train's readers on any bytes, in every format: documents, or one line naming the file."""
    import tempfile

    from maskplay.data.readers import iter_documents

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.txt"
        path.write_bytes(data)
        for policy in ("error", "replace"):
            try:
                docs = list(iter_documents([path], fmt=fmt, on_invalid_utf8=policy))
            except ValueError as err:
                assert str(path) in one_line(err)
                continue
            assert all("\x00" not in p for d in docs for p in d.paragraphs)


test_corpus_readers_refuse_in_one_line, test_corpus_readers_refuse_in_one_line_long = fuzz(
    data=st.one_of(TEXTY, st.lists(st.sampled_from([b'<doc id="1" title="T">', b"</doc>", b'{"text": "a"}', b"{",
                                                    b"\n", b"word", b"&lt;ref&gt;", b"\xff"]), max_size=20).map(b"".join)),
    fmt=st.sampled_from(["auto", "text", "paragraphs", "jsonl", "wikiextractor"]))(_check_corpus)


# ---- the tokenizer: what round-trips ----------------------------------------------------------------------------

_TOKENIZER = {}


def bundled_tokenizer():
    if not _TOKENIZER:
        from maskplay.data.tokenizer import load_tokenizer
        from maskplay.runtime.model_dir import BUNDLED_MODELS

        _TOKENIZER["tok"] = load_tokenizer(BUNDLED_MODELS["tta-mini-wiki"])
    return _TOKENIZER["tok"]


ATTACHED = {".", "?", "!", ","}  # the WordPiece decoder's cleanup: these pieces join the word before them


def decode_oracle(pieces: list[str], specials: set[str]) -> str:
    """The decoder's rule, written out: specials ([UNK] included) dropped; a ## piece continues its word; . ? ! ,
    attach to what precedes; every other piece starts a new word after one space."""
    out = ""
    for piece in (p for p in pieces if p not in specials):
        if piece.startswith("##"):
            out += piece[2:]
        elif not out or piece in ATTACHED:
            out += piece
        else:
            out += " " + piece
    return out


def _check_round_trip(text: str) -> None:
    """What round-trips through the uncased WordPiece tokenizer (docs/reference/errors.md):
    1. encoding never fails on a str without surrogates (what the strict UTF-8 reader yields);
    2. the pieces spell the *normalised* text: with N = BertNormalizer(text) (control characters dropped, white
       space made spaces, CJK ideographs spaced, lower-cased, accents stripped) and W = BertPreTokenizer(N) (split
       on white space and around each punctuation character), each word of W is either spelled exactly by its
       pieces (## marking continuations) or is the single piece [UNK] (a character outside the vocabulary, or a
       word over 100 characters);
    3. decode(encode(text)) is those pieces written back: words joined by one space, ## pieces joined to their
       word, . ? ! , attached to the word before, [UNK] dropped (decode_oracle);
    4. so the normalised text round-trips: when no word is [UNK], encoding decode(encode(text)) gives the same
       pieces again. What does not come back: case, accents, control characters, the kind and amount of white
       space, and whether punctuation was spaced."""
    tok = bundled_tokenizer()
    backend = tok.backend
    specials = {backend.id_to_token(i) for i in tok.special.all}
    hypothesis.assume(not any(s in text for s in specials))  # literal "[SEP]" in text is read as the token itself
    enc = backend.encode(text, add_special_tokens=False)
    words = [w for w, _ in backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str(text))]
    grouped: dict[int, list[str]] = {}
    for piece, word in zip(enc.tokens, enc.word_ids, strict=True):
        grouped.setdefault(word, []).append(piece)
    assert sorted(grouped) == list(range(len(words)))
    for k, word in enumerate(words):
        pieces = grouped[k]
        if pieces != ["[UNK]"]:
            assert pieces[0] == word[: len(pieces[0])] and not pieces[0].startswith("##")
            assert "".join(p.removeprefix("##") for p in pieces) == word
    decoded = tok.decode(enc.ids)
    assert decoded == decode_oracle(enc.tokens, specials)
    if "[UNK]" not in enc.tokens:
        assert backend.encode(decoded, add_special_tokens=False).tokens == enc.tokens


UNICODE = st.one_of(st.text(max_size=80),  # any code point but surrogates
                    st.text(st.sampled_from("abcXYZ éÉüß東京 .,!?'-\t\n\u2028\x00\u0301\u200b日"), max_size=60))
test_wordpiece_round_trip, test_wordpiece_round_trip_long = fuzz(text=UNICODE)(_check_round_trip)


def test_the_round_trip_oracle_can_fail():
    """The oracle is not vacuous: it tells a wrong join apart, and case and accents do not come back."""
    tok = bundled_tokenizer()
    enc = tok.backend.encode("Héllo, World .", add_special_tokens=False)
    assert tok.decode(enc.ids) == decode_oracle(enc.tokens, set()) == "hello, world."
    assert decode_oracle(["a", "##b", "c"], set()) == "ab c" != "a b c"


# ---- config loaders ---------------------------------------------------------------------------------------------

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True), st.text(max_size=8))
JSONISH = st.one_of(SCALARS, st.lists(SCALARS, max_size=3), st.dictionaries(st.text(max_size=6), SCALARS, max_size=3))


def _config_keys() -> list[str]:
    import dataclasses

    from maskplay.config import ModelConfig
    from maskplay.registry import family_sections

    # config.json's keys: the fields, and the families' sections in place of `sections`
    return [f.name for f in dataclasses.fields(ModelConfig) if f.name != "sections"] + list(family_sections())


def _check_model_config(data: dict) -> None:
    """config.json of a model: a ModelConfig whose fields have their types, or one line naming file and field."""
    from maskplay.config import ModelConfig, from_dict

    try:
        config = from_dict(ModelConfig, data, source="m/config.json")
    except ValueError as err:
        message = one_line(err)
        assert message.startswith(("m/config.json", "family", "unknown family")) or any(k in message for k in data), message
        return
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        assert getattr(config, key) == value or math.isnan(value)


MODEL_CONFIG = st.dictionaries(st.sampled_from(_config_keys()), JSONISH, max_size=4)
test_model_config_loader_refuses_in_one_line, test_model_config_loader_refuses_in_one_line_long = \
    fuzz(data=MODEL_CONFIG)(_check_model_config)


def _check_train_toml(text: str) -> None:
    """A TOML training config of any content: a TrainConfig, or one line naming the file."""
    import tempfile

    from maskplay.tasks.train.config import load_train_config

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.toml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            load_train_config(path)
        except ValueError as err:
            one_line(err)


SECTIONS = ["model", "data", "optim", "run", "model.electra", "model.unilm"]
TOML = st.one_of(st.text(max_size=120), st.lists(st.tuples(
    st.sampled_from(SECTIONS), st.sampled_from(["lr", "max_steps", "batch_size", "max_length", "hidden_size", "preset",
                                                "family", "device", "threads", "seed", "betas", "progress", "x"]),
    st.sampled_from(["1", "0", "-1", "1.5", "nan", "inf", '"fast"', "true", "[1, 2]", '"cpu"', '"cuda:9"', "{a = 1}",
                     '"tiny"', '"bert"', "1e300", '""'])), max_size=5).map(
    lambda rows: "".join(f"[{s}]\n{k} = {v}\n" for s, k, v in rows)))
test_train_toml_loader_refuses_in_one_line, test_train_toml_loader_refuses_in_one_line_long = \
    fuzz(text=TOML)(_check_train_toml)


def _check_hf_config(data: dict) -> None:
    """A HuggingFace config.json: typed, or one line naming the file and key."""
    from maskplay.families.hf import check_hf_types

    try:
        check_hf_types(data, "hf/config.json")
    except ValueError as err:
        assert one_line(err).startswith('hf/config.json: "')


HF_KEYS = ["hidden_size", "num_hidden_layers", "vocab_size", "num_labels", "layer_norm_eps", "hidden_act",
           "tie_word_embeddings", "id2label", "pad_token_id", "hidden_dropout_prob", "other"]
test_hf_config_types_refuse_in_one_line, test_hf_config_types_refuse_in_one_line_long = \
    fuzz(data=st.dictionaries(st.sampled_from(HF_KEYS), JSONISH, max_size=4))(_check_hf_config)


# ---- the option parser ------------------------------------------------------------------------------------------

def _numeric_actions() -> list[tuple[str, str, Callable]]:
    """(command, option, type) of every option of every command whose value is a number."""
    from maskplay.cli import build_parser

    found = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}".strip())
            elif action.option_strings and action.type is not None and action.type is not str:
                found.append((path, action.option_strings[-1], action.type))

    walk(build_parser(), "")
    return found


# Options whose value is a bare int/float on purpose, each with the check that runs instead.
BARE_NUMBERS = {
    ("embed", "--layer"): "any integer: 0 embeddings, k block k, -k from the top; checked against the model",
    ("eval sts", "--layer"): "as embed --layer",
    ("eval nbest", "--weights"): "a grid, checked in the handler: every weight finite and >= 0",
    ("eval nbest", "--bonuses"): "a grid, checked in the handler: every bonus finite",
}


def test_every_numeric_option_declares_its_range():
    """No numeric option is a bare int/float but those listed (with the check that runs instead)."""
    from maskplay.cli import common

    declared = {getattr(common, name) for name in ("positive_int", "non_negative_int", "finite_float",
                                                   "positive_float", "non_negative_float", "probability", "fraction",
                                                   "percent", "seed_int")}
    bare = [(cmd, opt) for cmd, opt, kind in _numeric_actions() if kind not in declared]
    unexplained = [c for c in bare if c not in BARE_NUMBERS]
    assert not unexplained, f"numeric options without a declared range: {unexplained}"
    assert len(_numeric_actions()) > 60


RANGES: dict[str, Callable[[float], bool]] = {
    "positive_int": lambda v: isinstance(v, int) and v >= 1,
    "non_negative_int": lambda v: isinstance(v, int) and v >= 0,
    "seed_int": lambda v: isinstance(v, int) and 0 <= v < 2**63,
    "finite_float": lambda v: math.isfinite(v),
    "positive_float": lambda v: math.isfinite(v) and v > 0,
    "non_negative_float": lambda v: math.isfinite(v) and v >= 0,
    "probability": lambda v: 0 < v <= 1,
    "fraction": lambda v: 0 <= v < 1,
    "percent": lambda v: 0 <= v < 100,
}

NUMBERISH = st.one_of(st.text(max_size=12), st.integers().map(str), st.floats().map(str),
                      st.sampled_from(["0", "-0", "1", "-1", "1e3", "nan", "-inf", "inf", "0x10", "1_000", " 2 ", "٣",
                                       "1.0", "0.5", "100", "99.99", "9223372036854775808", ""]))


def _check_option_value(value: str, name: str) -> None:
    """Every range type on any string: a value in its range, or ArgumentTypeError (one line naming the value)."""
    from maskplay.cli import common

    try:
        parsed = getattr(common, name)(value)
    except argparse.ArgumentTypeError as err:
        one_line(err)
        return
    assert RANGES[name](parsed), (name, value, parsed)


test_option_types_accept_only_their_range, test_option_types_accept_only_their_range_long = \
    fuzz(value=NUMBERISH, name=st.sampled_from(sorted(RANGES)))(_check_option_value)


def _check_parser(index: int, value: str) -> None:
    """The real parser, each numeric option of each command with any value: parsed in range, or exit 2 with one
    line `maskplay CMD: error: argument OPTION: ...`."""
    import contextlib
    import io

    from maskplay.cli import build_parser

    command, option, kind = ACTIONS[index % len(ACTIONS)]
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = PARSER.parse_known_args([*command.split(), option, value])[0]
    except SystemExit as exit_:
        lines = stderr.getvalue().strip().splitlines()
        assert exit_.code == 2 and len(lines) == 1, stderr.getvalue()
        assert lines[0].startswith(f"maskplay {command}: error: ") or lines[0].startswith("maskplay ")
        return
    del build_parser
    parsed = getattr(args, option.lstrip("-").replace("-", "_"), None)
    name = getattr(kind, "__name__", "")
    if name in RANGES and parsed is not None and not isinstance(parsed, list):
        assert RANGES[name](parsed), (command, option, value, parsed)


def _parser_and_actions() -> tuple[argparse.ArgumentParser, list]:
    from maskplay.cli import build_parser

    return build_parser(), _numeric_actions()


PARSER, ACTIONS = _parser_and_actions()
test_the_parser_refuses_in_one_line, test_the_parser_refuses_in_one_line_long = \
    fuzz(index=st.integers(0, 10_000), value=NUMBERISH)(_check_parser)


def test_an_accented_letter_normalises_to_its_base():
    """The normaliser the round trip is stated with strips accents (NFD, marks dropped): checked on its own."""
    tok = bundled_tokenizer()
    assert tok.backend.normalizer.normalize_str("Élan") == "elan"
    assert unicodedata.normalize("NFD", "É")[0] == "E"
