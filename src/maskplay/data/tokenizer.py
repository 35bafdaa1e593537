"""Uncased WordPiece tokenizers, or cased byte-level BPE ones (GPT-BERT's), built with HuggingFace `tokenizers`,
with maskplay's special tokens at ids 0-6.

Every sentence is encoded as `[SOS] pieces [EOS]` ([CLS] ... [SEP] with a BERT vocabulary).

A HuggingFace directory's tokenizer.json (a causal LM's: GPT-2's byte-level BPE with `<|endoftext|>` only, LLaMA's
`<s>` / `</s>` / `<unk>`, Qwen's `<|im_start|>` ...) names its roles in tokenizer_config.json (`bos_token`, ...) and
config.json (`bos_token_id`, ...): those fill the roles maskplay's names do not find, [SOS] being the bos token (a
sentence is scored after it, as HuggingFace scores a causal LM with its bos prepended). What is still missing falls
back as the causal converter's config does (families/hf/causal.py): start <-> end, pad / unk / mask / sep -> end."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

SPECIAL_TOKENS = ["[PAD]", "[EOS]", "[UNK]", "[SOS]", "[MASK]", "[CLS]", "[SEP]"]
# RoBERTa's / XLM-R's names for the same roles (HuggingFace directories read as models)
ROBERTA_SPECIALS = ["<pad>", "</s>", "<unk>", "<s>", "<mask>"]


@dataclass(frozen=True)
class SpecialIds:
    pad: int
    eos: int
    unk: int
    sos: int
    mask: int
    all: tuple[int, ...]
    sep: int = -1  # between a source and a target: [SEP] when the vocabulary has it, else the end token
    # the roles a HuggingFace tokenizer does not have, filled with its end (or start) token: a masked LM cannot
    # PLL-score with a "mask" that is </s> (score.passes.check_mask_token), a causal LM says what it starts with
    fallback: tuple[str, ...] = ()


def _find(vocab: dict[str, int], *names: str, source: str = "", required: bool = True) -> int | None:
    for name in names:
        if name in vocab:
            return vocab[name]
    if required:
        raise ValueError(f"tokenizer {source or '(in memory)'} has none of the special tokens {names}")
    return None


def _special_ids(backend: HFTokenizer, roles: dict[str, int], source: str) -> SpecialIds:
    """A HuggingFace tokenizer's roles: maskplay's names first, then `roles`, then the end token (the start token
    when there is no end token); a tokenizer with neither is refused by name."""
    vocab = backend.get_vocab()

    def find(role: str, *names: str) -> int | None:
        found = _find(vocab, *names, required=False)
        return found if found is not None else roles.get(role)

    sos, eos = find("sos", "[SOS]", "[CLS]", "<s>"), find("eos", "[EOS]", "[SEP]", "</s>")
    if sos is None and eos is None:
        raise ValueError(f"tokenizer {source or '(in memory)'} has no start or end token: none of [SOS] [CLS] <s> "
                         "[EOS] [SEP] </s>, and tokenizer_config.json / config.json name no bos or eos token")
    fallback = [role for role, found in (("sos", sos), ("eos", eos)) if found is None]
    sos = sos if sos is not None else eos
    eos = eos if eos is not None else sos
    assert sos is not None and eos is not None

    def or_end(role: str, value: int | None) -> int:
        if value is None:
            fallback.append(role)
        return eos if value is None else value

    ids = dict(pad=or_end("pad", find("pad", "[PAD]", "<pad>")), unk=or_end("unk", find("unk", "[UNK]", "<unk>")),
               mask=or_end("mask", find("mask", "[MASK]", "<mask>")),
               sep=or_end("sep", _find(vocab, "[SEP]", "[EOS]", "</s>", required=False)))
    named = {vocab[t] for t in (*SPECIAL_TOKENS, *ROBERTA_SPECIALS) if t in vocab}
    return SpecialIds(sos=sos, eos=eos, all=tuple(sorted({*named, *_added_specials(backend), sos, eos, *ids.values()})),
                      fallback=tuple(fallback), **ids)


def _added_specials(backend: HFTokenizer) -> set[int]:
    """Ids of the tokens a tokenizer.json marks special in its added_tokens (<|endoftext|>, <|im_start|>, ...)."""
    return {i for i, token in backend.get_added_tokens_decoder().items() if token.special}


class Tokenizer:
    """A thin wrapper that knows where the specials are and frames every sentence with start/end."""

    def __init__(self, backend: HFTokenizer, source: str = "", roles: dict[str, int] | None = None) -> None:
        """roles: ids by role (sos, eos, pad, unk, mask) read from a HuggingFace directory (hf_roles), filling
        those the special-token names do not find; with them, what is still missing falls back to the end token."""
        self.backend = backend
        self.source = source
        vocab = backend.get_vocab()
        self.special = _special_ids(backend, roles, source) if roles is not None else SpecialIds(
            pad=_find(vocab, "[PAD]", "<pad>", source=source), eos=_find(vocab, "[EOS]", "[SEP]", "</s>", source=source),
            unk=_find(vocab, "[UNK]", "<unk>", source=source), sos=_find(vocab, "[SOS]", "[CLS]", "<s>", source=source),
            mask=_find(vocab, "[MASK]", "<mask>", source=source),
            all=tuple(sorted(vocab[t] for t in (*SPECIAL_TOKENS, *ROBERTA_SPECIALS) if t in vocab)),
            sep=_find(vocab, "[SEP]", "[EOS]", "</s>", source=source),
        )
        backend.no_padding()
        backend.no_truncation()

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return [self.special.sos, *self.backend.encode(text, add_special_tokens=False).ids, self.special.eos]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        s, e = self.special.sos, self.special.eos
        return [[s, *enc.ids, e] for enc in self.backend.encode_batch(texts, add_special_tokens=False)]

    def tokens(self, text: str) -> list[str]:
        """The pieces of `text` framed by the start and end tokens, aligned with encode()."""
        return [self.backend.id_to_token(i) for i in self.encode(text)]

    def decode(self, ids: list[int]) -> str:
        return self.backend.decode(ids, skip_special_tokens=True)

    def model_config_ids(self) -> dict[str, object]:
        """The special-token fields of a ModelConfig for this vocabulary."""
        s = self.special
        return dict(vocab_size=self.vocab_size, pad_token_id=s.pad, eos_token_id=s.eos, unk_token_id=s.unk,
                    sos_token_id=s.sos, mask_token_id=s.mask, special_token_ids=list(s.all), sep_token_id=s.sep)

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(directory / "tokenizer.json"))

    def save_vocab(self, path: str | Path) -> None:
        """vocab.txt: one piece per line in id order (loadable by load_tokenizer and by BERT tooling)."""
        vocab = self.backend.get_vocab()
        by_id = sorted(vocab.items(), key=lambda kv: kv[1])
        if [i for _, i in by_id] != list(range(len(by_id))):
            raise ValueError(f"tokenizer {self.source}: ids are not contiguous, cannot write a vocab.txt")
        if any("\n" in t for t, _ in by_id):
            raise ValueError(f"tokenizer {self.source}: a piece contains a newline, cannot write a vocab.txt")
        Path(path).write_text("".join(t + "\n" for t, _ in by_id), encoding="utf-8")


def check_covers(tokenizer: Tokenizer, rows: int, model: str = "the model") -> None:
    """A tokenizer must cover at least half of the embedding rows of the model it is given with. Checkpoints pad
    their tables beyond their tokenizers, by a little (GPT-2-style rounding to a multiple of 64 or 128, Qwen2's
    151,936 rows for 151,665 pieces, Phi-2's 51,200 for 50,295, T5's 32,128 for 32,100), and that stays allowed;
    a tokenizer of under half the rows is another model's (every word of a text would be its unknown piece)."""
    if 2 * tokenizer.vocab_size < rows:
        raise ValueError(f"{tokenizer.source or 'the tokenizer (in memory)'} has {tokenizer.vocab_size:,} pieces for "
                         f"the {rows:,} embedding rows of {model}: not this model's tokenizer")


def wordpiece_from_vocab(vocab_file: str | Path) -> HFTokenizer:
    """An uncased BERT-style WordPiece tokenizer over an existing vocab.txt."""
    vocab_file = Path(vocab_file)
    vocab: dict[str, int] = {}
    with open(vocab_file, encoding="utf-8") as f:
        for index, line in enumerate(f):
            token = line.rstrip("\n")
            if token in vocab:
                raise ValueError(f"{vocab_file}:{index + 1}: duplicate vocabulary entry {token!r}")
            vocab[token] = index
    if "[UNK]" not in vocab:
        raise ValueError(f"{vocab_file}: no [UNK] token")
    tok = _bert_pipeline(HFTokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100)))
    # Registered as special (their ids do not change): decode(skip_special_tokens=True) drops them, and a
    # literal "[MASK]" in a text is one token, as in a trained tokenizer and in HuggingFace's BERT.
    tok.add_special_tokens([t for t in SPECIAL_TOKENS if t in vocab])
    return tok


def _bert_pipeline(tok: HFTokenizer) -> HFTokenizer:
    """Uncased BERT normalization (lowercase, accents stripped), BERT pre-tokenization, WordPiece decoding."""
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def train_wordpiece(texts: Iterable[str], vocab_size: int, min_frequency: int = 2, limit_alphabet: int = 1000,
                    show_progress: bool = False) -> Tokenizer:
    """Train an uncased WordPiece on `texts` with the pipeline of wordpiece_from_vocab and maskplay's
    SPECIAL_TOKENS at ids 0-6. `limit_alphabet` keeps rare characters (Wikipedia has thousands) from eating
    the vocabulary; they become [UNK]."""
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must exceed the {len(SPECIAL_TOKENS)} special tokens, got {vocab_size}")
    if min_frequency < 1:
        raise ValueError(f"min_frequency must be at least 1, got {min_frequency}")
    tok = _bert_pipeline(HFTokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100)))
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                        special_tokens=list(SPECIAL_TOKENS), limit_alphabet=limit_alphabet,
                                        continuing_subword_prefix="##", show_progress=show_progress)
    tok.train_from_iterator(texts, trainer=trainer)
    vocab = tok.get_vocab()
    if [vocab.get(t) for t in SPECIAL_TOKENS] != list(range(len(SPECIAL_TOKENS))):
        raise RuntimeError(f"trained vocabulary lost the special-token layout: {[vocab.get(t) for t in SPECIAL_TOKENS]}")
    return Tokenizer(tok, source="(trained)")


def train_byte_bpe(texts: Iterable[str], vocab_size: int, min_frequency: int = 2,
                   show_progress: bool = False) -> Tokenizer:
    """Train a byte-level BPE on `texts` (GPT-2's byte alphabet, so no text has an unknown piece and decoding
    gives back the text byte for byte: no normalisation, cased), with maskplay's SPECIAL_TOKENS at ids 0-6 and
    the 256 bytes after them."""
    if vocab_size <= len(SPECIAL_TOKENS) + 256:
        raise ValueError(f"a byte-level BPE needs vocab_size above the {len(SPECIAL_TOKENS)} special tokens and "
                         f"256 bytes, got {vocab_size}")
    if min_frequency < 1:
        raise ValueError(f"min_frequency must be at least 1, got {min_frequency}")
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=list(SPECIAL_TOKENS), show_progress=show_progress,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    vocab = tok.get_vocab()
    if [vocab.get(t) for t in SPECIAL_TOKENS] != list(range(len(SPECIAL_TOKENS))):
        raise RuntimeError(f"trained vocabulary lost the special-token layout: {[vocab.get(t) for t in SPECIAL_TOKENS]}")
    return Tokenizer(tok, source="(trained)")


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load from a directory (tokenizer.json or vocab.txt in it), a tokenizer.json, any vocab .txt, or a bundled
    model's name (its tokenizer: `--tokenizer tta-mini-wiki`). A directory's file is one of its own: a symbolic
    link out of it is refused before its target is looked at (runtime.files.model_file)."""
    from ..runtime.files import model_file

    path = Path(path)
    if not path.exists():
        from ..runtime.models import bundled_model_dir

        path = bundled_model_dir(str(path)) or path
    if path.is_dir():
        for name in ("tokenizer.json", "vocab.txt"):
            if model_file(path, name).is_file():
                return load_tokenizer(path / name)
        txts = sorted(path.glob("vocab*.txt"))
        if len(txts) == 1 and model_file(path, txts[0].name).is_file():
            return load_tokenizer(txts[0])
        raise FileNotFoundError(f"{path}: no tokenizer.json or vocab.txt in this directory")
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer {path} not found")
    note_tokenizer_class(path)
    if path.suffix == ".json":
        try:
            backend = HFTokenizer.from_file(str(path))
        except Exception as err:  # the tokenizers library raises a bare Exception on bad JSON
            try:
                json.loads(path.read_bytes().decode("utf-8"))
            except ValueError as bad:  # JSON syntax (with its line and column) or not UTF-8: named with the file
                raise ValueError(f"{path}: not readable JSON (truncated or damaged?): {bad}") from None
            raise ValueError(f"{path}: not a tokenizers JSON file: {err}") from None
        return Tokenizer(backend, source=str(path), roles=hf_roles(path.parent, backend.get_vocab()))
    return Tokenizer(wordpiece_from_vocab(path), source=str(path))


# tokenizer_config.json's tokenizer_class values of the architectures maskplay reads (each also with "Fast"), and
# transformers' generic ones: maskplay reads tokenizer.json (else vocab.txt) as it is for each of them
KNOWN_TOKENIZER_CLASSES = frozenset({
    "PreTrainedTokenizer", "PreTrainedTokenizerFast", "TokenizersBackend", "BertTokenizer", "ElectraTokenizer",
    "DistilBertTokenizer", "AlbertTokenizer", "RobertaTokenizer", "XLMRobertaTokenizer", "DebertaTokenizer",
    "DebertaV2Tokenizer", "XLNetTokenizer", "GPT2Tokenizer", "GPTNeoXTokenizer", "LlamaTokenizer",
    "CodeLlamaTokenizer", "Qwen2Tokenizer", "MPNetTokenizer"})
_NOTED: set[str] = set()


def note_tokenizer_class(path: Path) -> None:
    """One line on stderr (once a file) when the tokenizer_config.json beside a tokenizer file names a
    tokenizer_class maskplay does not know (a custom one, say): its code is never run, the file is read as it is."""
    config = path.parent / "tokenizer_config.json"
    data = _json_object(path.parent, config.name) if config.name != path.name else None
    named = data.get("tokenizer_class") if data is not None else None
    if named is None or str(config) in _NOTED:
        return
    if isinstance(named, str) and named.removesuffix("Fast") in KNOWN_TOKENIZER_CLASSES:
        return
    _NOTED.add(str(config))
    print(f"maskplay: {config}: tokenizer_class {named!r} is not one maskplay knows; reading {path.name} as it is",
          file=sys.stderr)


# maskplay role -> HuggingFace's name for it (tokenizer_config.json's `{name}_token`, config.json's `{name}_token_id`)
HF_ROLES = {"sos": "bos", "eos": "eos", "pad": "pad", "unk": "unk", "mask": "mask"}


def hf_roles(directory: Path, vocab: dict[str, int]) -> dict[str, int] | None:
    """The special-token ids a HuggingFace directory gives its tokenizer.json: tokenizer_config.json's tokens
    (`"bos_token": "<s>"` or an AddedToken object), then config.json's ids (bos / eos / pad; a list: its first; in
    a maskplay config.json beside a tokenizer_config.json, as `convert --from-hf` writes them: sos / eos / pad).
    None when neither file is HuggingFace's (a maskplay directory: its tokenizer keeps maskplay's names only)."""
    roles: dict[str, int] = {}
    hf = False
    data = _json_object(directory, "tokenizer_config.json")
    if data is not None:
        hf = True
        for role, name in HF_ROLES.items():
            token = data.get(f"{name}_token")
            token = token.get("content") if isinstance(token, dict) else token
            if isinstance(token, str) and token in vocab:
                roles[role] = vocab[token]
    data = _json_object(directory, "config.json")
    hf_config = data is not None and ("model_type" in data or "architectures" in data)
    if data is not None and (hf or hf_config):  # maskplay's config.json (`convert --from-hf`'s): sos_token_id ...
        hf = True
        for role in ("sos", "eos", "pad"):
            value = data.get(f"{HF_ROLES[role] if hf_config else role}_token_id")
            value = value[0] if isinstance(value, list) and value else value
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(vocab):
                roles.setdefault(role, value)
    return roles if hf else None


def _json_object(directory: Path, name: str) -> dict | None:
    """The object of the JSON file `name` in `directory`, or None (absent, unreadable, a symbolic link out of the
    directory: the role files are optional, config.json is read and its errors named by the model's loading)."""
    from ..runtime.files import model_file
    from ..runtime.json_files import read_json_file

    try:
        data = read_json_file(model_file(directory, name))  # size-capped: one that never ends is no MemoryError
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
