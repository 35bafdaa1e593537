"""The words-seen budget (run.max_words) and the models exported at words seen (run.checkpoint_at_words): the
word counts `maskplay prepare` writes against BabyLM's `len(text.split())`, the steps at which the marks and the
budget are reached against a count made from the batches' own rows, and a resume across a mark, bitwise."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from maskplay import MaskplayModel
from maskplay.data.dataset import TokenDataset, write_split
from maskplay.data.prepare import PrepareConfig, prepare_corpus
from maskplay.data.tokenizer import SPECIAL_TOKENS, load_tokenizer, train_wordpiece
from maskplay.data.words import count_words, piece_words
from maskplay.tasks.train import train
from maskplay.tasks.train.batches import epoch_batches, sequence_lengths
from maskplay.tasks.train.export import words_name
from tests.tasks.train.test_train import VOCAB, assert_same_weights, small_config, weights

TEXT = [
    "The cat sat on the mat. It was happy there, wasn't it?",
    "Dr. Jones met J. R. R. Tolkien in the U.S. in 1950. They talked for 2.5 hours!",
    "A dog barked.  The bird sang.\tNobody listened -- not even the cafés' owners.",
    "Rain fell on the old town for many days and nights without stopping once.",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("corpus")
    (root / "c.txt").write_text("\n".join(TEXT * 3) + "\n")
    train_wordpiece(TEXT, 80).save(root)
    return root / "c.txt", root / "tokenizer.json"


def test_piece_words_give_each_word_to_its_first_piece():
    # "ab cd" as pieces "a" "b" " c" "d": words begin at pieces 0 and 2
    assert piece_words("ab cd", [(0, 1), (1, 2), (2, 4), (4, 5)]).tolist() == [1, 0, 1, 0]
    # a word the tokenizer dropped ("\x01") goes to the next piece; a trailing one to the last piece
    assert piece_words("a \x01 b \x02", [(0, 1), (4, 5)]).tolist() == [1, 3]
    assert piece_words("", []).tolist() == []


@pytest.mark.parametrize("overlong", ["split", "truncate"])
def test_prepared_word_counts_are_babylms(corpus, tmp_path, overlong):
    text, tokenizer = corpus
    out = tmp_path / "data"
    summary = prepare_corpus([text], tokenizer, out, PrepareConfig(max_length=8, valid_fraction=0.0,
                                                                    overlong=overlong))
    data = TokenDataset(out / "train")
    all_words = sum(count_words(line) for line in text.read_text().splitlines())
    assert data.num_words == summary.train_words == json.loads((out / "train/meta.json").read_text())["num_words"]
    if overlong == "split":  # nothing dropped: every word of the text, once
        assert data.num_words == all_words
        return
    # truncated to 6 pieces: a word is kept when the pieces of the words before it are fewer than 6 (an oracle
    # that only tokenizes prefixes: WordPiece splits at whitespace, so a prefix's pieces are the text's first ones)
    tok = load_tokenizer(tokenizer)
    from maskplay.data.sentences import split_sentences

    kept = 0
    for line in text.read_text().splitlines():
        for sentence in split_sentences(line):
            words = sentence.split()
            kept += sum(len(tok.backend.encode(" ".join(words[:k]), add_special_tokens=False).ids) < 6
                        for k in range(len(words)))
    assert data.num_words == kept == all_words - summary.dropped_words
    assert summary.dropped_words > 0


def word_data(directory: Path, n_train: int = 160, seed: int = 0) -> Path:
    """test_train's random sequences, each piece but [SOS] / [EOS] beginning a word with probability 0.7."""
    directory.mkdir(parents=True, exist_ok=True)
    names = SPECIAL_TOKENS + [f"w{i}" for i in range(len(SPECIAL_TOKENS), VOCAB)]
    (directory / "vocab.txt").write_text("\n".join(names) + "\n")
    load_tokenizer(directory / "vocab.txt").save(directory)
    rng = np.random.default_rng(seed)
    seqs = [[3, *rng.integers(7, VOCAB, n - 2).tolist(), 1] for n in rng.integers(4, 40, n_train + 40)]
    marks = [[0, *(rng.random(len(s) - 2) < 0.7).astype(int).tolist(), 0] for s in seqs]
    write_split(directory / "train", seqs[:n_train], VOCAB, words=marks[:n_train])
    write_split(directory / "valid", seqs[n_train:], VOCAB, words=marks[n_train:])
    return directory


@pytest.fixture(scope="module")
def wdata(tmp_path_factory) -> Path:
    return word_data(tmp_path_factory.mktemp("wdata"))


def words_per_step(data: Path, steps: int, batch_size: int = 16, max_length: int = 32) -> list[int]:
    """The oracle: each step's rows (epoch_batches, test_train's bucket_window 4) and their words after
    truncation to max_length pieces."""
    split = TokenDataset(data / "train")
    lengths = sequence_lengths(split)
    out: list[int] = []
    epoch = 0
    while len(out) < steps:
        for rows in epoch_batches(lengths, batch_size, 0, epoch, 4):
            out.append(sum(int(split.word_marks(int(i))[:max_length].sum()) for i in rows))
        epoch += 1
    return out[:steps]


MARKS = [100, 200, 350, 500, 700]


def test_words_budget_ends_the_run_and_marks_are_loadable_models(wdata, tmp_path):
    per_step = np.cumsum(words_per_step(wdata, 8))
    budget = int(per_step[4]) - 1  # reached during step 5
    run = train(small_config(wdata, tmp_path / "r", f"run.max_words={budget}", "run.save_every=1",
                             "run.keep_last=10", f"run.checkpoint_at_words={','.join(map(str, MARKS))}"))
    assert run.status == "budget" and run.step == 5
    records = [json.loads(line) for line in (run.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["words"] for r in records if "words" in r] == per_step[:5].tolist()
    exported = sorted(int(p.name) for p in (run.run_dir / "words").iterdir())
    assert exported == [w for w in MARKS if w <= per_step[4]]
    for mark in exported:
        info = json.loads((run.run_dir / "words" / str(mark) / "words.json").read_text())
        step = int(np.searchsorted(per_step, mark)) + 1  # the first step whose words reach the mark
        assert info == {"checkpoint_at_words": mark, "words_seen": int(per_step[step - 1]),
                        "tokens_seen": info["tokens_seen"], "step": step}
        model = MaskplayModel.from_pretrained(run.run_dir / "words" / str(mark))
        assert_same_weights(weights(run.run_dir, f"words/{mark}"), weights(run.run_dir, f"ckpt-{step:06d}"))
        assert model.family == "tta"
    state = json.loads((run.run_dir / "ckpt-000005" / "state.json").read_text())
    assert state["words_seen"] == per_step[4]


def test_resume_across_a_words_mark_is_bitwise(wdata, tmp_path):
    marks = "run.checkpoint_at_words=300,600"
    whole = train(small_config(wdata, tmp_path / "whole", marks, family="bert"))
    part = train(small_config(wdata, tmp_path / "part", marks, "run.stop_at_step=1", family="bert"))
    assert part.step == 1 and not (part.run_dir / "words").exists()
    rest = train(small_config(wdata, tmp_path / "part", marks, family="bert"), resume=True)
    assert rest.step == whole.step == 8
    assert_same_weights(weights(whole.run_dir), weights(rest.run_dir))
    for mark in ("300", "600"):
        assert_same_weights(weights(whole.run_dir, f"words/{mark}"), weights(rest.run_dir, f"words/{mark}"))
        assert (whole.run_dir / "words" / mark / "words.json").read_text() == \
            (rest.run_dir / "words" / mark / "words.json").read_text()


def test_words_need_word_counts_and_sane_marks(tmp_path):
    from tests.tasks.train.test_train import make_data

    plain = make_data(tmp_path / "plain")  # no words.bin
    with pytest.raises(ValueError, match=r"no words\.bin.*prepare the corpus again"):
        train(small_config(plain, tmp_path / "r", "run.max_words=100"))
    with pytest.raises(ValueError, match=r"run\.checkpoint_at_words must be increasing"):
        small_config(plain, tmp_path / "r", "run.checkpoint_at_words=200,100")
    with pytest.raises(ValueError, match=r"run\.max_words must be at least 1"):
        small_config(plain, tmp_path / "r", "run.max_words=0")


def test_words_names():
    assert [words_name(w) for w in (1_000_000, 100_000_000, 20_000, 1500)] == ["1M", "100M", "20K", "1500"]


def test_dataloader_workers_keep_the_words_of_a_step(wdata):
    from maskplay.tasks.train.batches import StepBatches, epoch_steps

    lengths = sequence_lengths(TokenDataset(wdata / "train"))
    steps = StepBatches(wdata / "train", epoch_batches(lengths, 16, 0, 0, 4), 0, 1, 2, 32, 0)
    expected = words_per_step(wdata, 3)
    for workers in (0, 1):
        got = [item.words for item, _ in zip(epoch_steps(steps, 0, 0, workers), range(3), strict=False)]
        assert got == expected


def babylm_folder(root: Path) -> Path:
    """BabyLM's download, in small: train_10M/*.train (one gzipped), dev/*.dev, test/*.test, a README."""
    import gzip

    (root / "train_10M").mkdir(parents=True)
    (root / "dev").mkdir()
    (root / "test").mkdir()
    (root / "train_10M" / "childes.train").write_text("*CHI:\twhat's that ?\n*MOT:\tit is a dog .\n\nyes .\n")
    (root / "train_10M" / "simple_wiki.train").write_text("= = = Dog = = =\nThe dog is a pet. It barks.\n")
    with gzip.open(root / "train_10M" / "switchboard.train.gz", "wt") as f:
        f.write("A:\tuh-huh , well I think so .\n")
    (root / "dev" / "childes.dev").write_text("held out words that must never be trained on\n")
    (root / "test" / "childes.test").write_text("test words\n")
    (root / "README.md").write_text("# BabyLM\n")
    return root


def test_babylm_layout_trains_on_its_train_files_alone(tmp_path, corpus):
    from maskplay.data.readers import resolve_corpus

    root = babylm_folder(tmp_path / "babylm")
    train_files = sorted((root / "train_10M").iterdir())
    assert resolve_corpus([root]) == resolve_corpus([root / "train_10M"]) == train_files
    out = tmp_path / "data"
    summary = prepare_corpus([root], corpus[1], out, PrepareConfig(valid_fraction=0.0))
    import gzip

    text = "".join(gzip.open(p, "rt").read() if p.suffix == ".gz" else p.read_text() for p in train_files)
    assert summary.train_words == count_words(text) == TokenDataset(out / "train").num_words
    (root / "train_100M").mkdir()
    (root / "train_100M" / "childes.train").write_text("more\n")
    with pytest.raises(ValueError, match=r"BabyLM training files .* several folders \(train_100M, train_10M\)"):
        resolve_corpus([root])


def test_babylm_strict_small_recipes_differ_only_in_the_family():
    from maskplay.tasks.train import load_train_config

    configs = {fam: load_train_config(Path(__file__).resolve().parents[3] / "configs" / "babylm" /
                                      f"strict-small-{fam}.toml").validate() for fam in ("gpt-bert", "gpt", "bert", "tta")}
    marks = [*range(1_000_000, 10_000_001, 1_000_000), *range(20_000_000, 100_000_001, 10_000_000)]
    for fam, config in configs.items():
        assert config.model.family == fam and config.model.preset == "gpt-bert-small"
        assert config.run.max_words == 100_000_000 and config.run.checkpoint_at_words == marks
        assert config.optim.ema == 0.999 and config.optim.ema_debias  # the average of the trained weights alone
        assert config.optim == configs["gpt-bert"].optim and config.data == configs["gpt-bert"].data
        same = {k: v for k, v in vars(config.model).items() if k not in ("family", "gpt_bert")}
        assert same == {k: v for k, v in vars(configs["gpt-bert"].model).items() if k not in ("family", "gpt_bert")}


def test_a_packed_rows_words_are_its_sequences_words_truncated(wdata):
    from maskplay.tasks.train.batches import pack_groups, row_words

    split = TokenDataset(wdata / "train")
    packed = pack_groups(sequence_lengths(split), 48)
    for length in (48, 20):  # a row of the packing's length, and rows truncated shorter (data.max_length)
        for i in range(len(packed) - 1):
            marks = np.concatenate([split.word_marks(j) for j in range(int(packed[i]), int(packed[i + 1]))])
            assert row_words(split, packed, i, length) == int(marks[:length].sum())
    assert row_words(split, None, 3, 5) == int(split.word_marks(3)[:5].sum())


def test_with_ema_a_mark_exports_the_moving_average_and_training_goes_on_from_the_raw_weights(wdata, tmp_path):
    from maskplay.tasks.train import checkpoint_files as ckpt

    per_step = np.cumsum(words_per_step(wdata, 4))
    mark = int(per_step[1])  # reached at step 2
    ema = train(small_config(wdata, tmp_path / "ema", "optim.ema=0.9", "optim.max_steps=4", "run.save_every=1",
                             "run.keep_last=10", f"run.checkpoint_at_words={mark}"))
    exported = weights(ema.run_dir, f"words/{words_name(mark)}")
    average = ckpt.read_tensors(ema.run_dir / "ckpt-000002" / "ema.safetensors")
    raw = weights(ema.run_dir, "ckpt-000002")
    assert all(torch.equal(exported[k], average[k]) for k in average)
    assert any(not torch.equal(exported[k], raw[k]) for k in average)
    plain = train(small_config(wdata, tmp_path / "plain", "optim.ema=0.9", "optim.max_steps=4"))
    assert_same_weights(weights(plain.run_dir, "final-raw"), weights(ema.run_dir, "final-raw"))
