"""`maskplay eval ... --file`: every format each task reads (told from the content, --format to override),
plain and gzip, and malformed rows as one-line errors naming file:line; end to end with a tiny model."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from maskplay.cli import main
from maskplay.data.tokenizer import load_tokenizer
from maskplay.tasks.eval.cola import load_cola
from maskplay.tasks.eval.files import detect, expand, read_text, semeval_pair, unique_names
from maskplay.tasks.eval.nbest import FirstPass, evaluate_nbest, load_nbest
from maskplay.tasks.eval.pairs import load_pairs, pair_files
from maskplay.tasks.eval.spelling import load_rwse
from maskplay.tasks.eval.sts import Pair, load_semeval, load_sts_file, load_sts_header, load_stsb
from tests.conftest import shared_path
from tests.tasks.score.test_score_support import one_thread, save_model_dir, tiny  # noqa: F401 (autouse fixture)

STSB_ROWS = ("main-captions\tMSRvid\t2012test\t0001\t5.000\tA man is playing a flute.\tA man plays a flute.\n"
             "main-captions\tMSRvid\t2012test\t0002\t3.800\tA dog runs.\tA cat \"sleeps.\n"
             "main-news\theadlines\t2013\t0003\t0.500\tStocks fall.\tRain in Spain.\textra\tcolumns\n")
SICK_ROWS = ("pair_ID\tsentence_A\tsentence_B\tentailment_label\trelatedness_score\n"
             "1\tA boy runs.\tA kid runs.\tENTAILMENT\t4.5\n2\tA boy runs.\tA cat eats.\tNEUTRAL\t1.2\n"
             "3\tA man sings.\tA woman sings.\tNEUTRAL\t3.1\n")
GLUE_ROWS = ("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
             "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA man plays.\tA man is playing.\t5.000\n"
             "1\tmain-captions\tMSRvid\t2012test\t0004\tnone\tnone\tA dog.\tA \"cat.\t0.750\n"
             "2\tmain-news\theadlines\t2013\t0005\tnone\tnone\tIt rains.\tIt pours.\t3.0\n")
COLA_ROWS = "gj04\t1\t\tThe cat sat on the mat.\ngj04\t0\t*\tCat the mat on sat.\nbc01\t1\t\tDogs bark.\n"
ZESCH = "1\n2\ngoals\ngaols\n4\nthe goals of England\n\n0\n0\ndog\ndig\n2\na dog ran far\n"


def _nbest_record(utt: str, ref: str, hyps: list[tuple[str, float]], lm: bool = True) -> str:
    return json.dumps({"utt_id": utt, "ref": ref, "hyps": [
        {"rank": k + 1, "text": t, "score": s, **({"lm": 0.0} if lm else {})} for k, (t, s) in enumerate(hyps)]})


def _mlm_scoring(utts: dict[str, tuple[str, list[tuple[str, float]]]]) -> str:
    return json.dumps({u: {"ref": ref, **{f"hyp_{k + 1}": {"score": s, "text": " " + t}
                                           for k, (t, s) in enumerate(hyps)}}
                       for u, (ref, hyps) in utts.items()}, indent=2, sort_keys=True)


def _semeval(folder: Path, name: str, inputs: list[str], golds: list[str]) -> Path:
    (folder / f"STS.input.{name}.txt").write_text("".join(x + "\n" for x in inputs))
    (folder / f"STS.gs.{name}.txt").write_text("".join(x + "\n" for x in golds))
    return folder / f"STS.input.{name}.txt"


# ---- reading and detection ------------------------------------------------------------------------------


def test_gzip_is_told_from_the_bytes_and_bad_bytes_name_the_line(tmp_path):
    plain = tmp_path / "x.jsonl"
    plain.write_text('{"sentence_good": "a b", "sentence_bad": "b a"}\n')
    packed = tmp_path / "y.data"  # gzip without a .gz suffix
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert read_text(packed) == read_text(plain)
    broken = tmp_path / "z.jsonl.gz"
    broken.write_bytes(gzip.compress(plain.read_bytes())[:-12])
    with pytest.raises(ValueError, match=r"z.jsonl.gz: not a readable gzip file"):
        read_text(broken)
    (tmp_path / "plain.jsonl.gz").write_bytes(plain.read_bytes())
    with pytest.raises(ValueError, match=r"plain.jsonl.gz: not a readable gzip file \(named .gz"):
        read_text(tmp_path / "plain.jsonl.gz")
    latin = tmp_path / "l.tsv"
    latin.write_bytes(b"ok\nalso ok\ncaf\xe9\n")
    with pytest.raises(ValueError, match=r"l.tsv:3: invalid UTF-8"):
        read_text(latin)


def test_formats_are_detected_from_the_content(tmp_path):
    files = {"a.csv": ("sts", STSB_ROWS, "stsb"), "b.txt": ("sts", SICK_ROWS, "sick"),
             "c.tsv": ("sts", GLUE_ROWS, "stsb-header"),
             "d.csv": ("sts", "sentence1,sentence2,score\n\"Hi, you.\",Hello.,4.0\n", "stsb-header"),
             "e.tsv": ("cola", COLA_ROWS, "cola"), "f.txt": ("spelling", ZESCH, "zesch"),
             "g.jsonl": ("pairs", '{"sentence_good": "a", "sentence_bad": "b"}\n', "blimp"),
             "h.jsonl": ("nbest", _nbest_record("u", "A", [("A", -1.0)]) + "\n", "jsonl"),
             "i.json": ("nbest", _mlm_scoring({"u": ("a", [("a", -1.0)])}), "mlm-scoring")}
    for name, (task, text, fmt) in files.items():
        (tmp_path / name).write_text(text)
        assert detect(task, tmp_path / name) == fmt, name
    _semeval(tmp_path, "news", ["a\tb"], ["1"])
    assert detect("sts", tmp_path / "STS.input.news.txt") == "semeval"
    (tmp_path / "odd.txt").write_text("just a sentence\n")
    with pytest.raises(ValueError, match=r"odd.txt: cannot tell its format .* reads stsb, stsb-header, sick, semeval "
                                         r"\(pass --format"):
        detect("sts", tmp_path / "odd.txt")


def test_names_and_directories(tmp_path):
    (tmp_path / "13").mkdir()
    (tmp_path / "14").mkdir()
    a = _semeval(tmp_path / "13", "headlines", ["a\tb"], ["1"])
    b = _semeval(tmp_path / "14", "headlines", ["a\tb"], ["1"])
    c = _semeval(tmp_path / "14", "images", ["a\tb"], ["1"])
    assert expand("sts", [tmp_path / "14"]) == [b, c]  # the gold files are not inputs
    assert unique_names([a, b, c]) == [str(a), str(b), "images"]
    with pytest.raises(ValueError, match="given more than once"):
        unique_names([c, c])
    with pytest.raises(ValueError, match="is a directory; `eval cola --file` takes files"):
        expand("cola", [tmp_path])
    assert semeval_pair(tmp_path / "14" / "STS.gs.images.txt") == (c, tmp_path / "14" / "STS.gs.images.txt")


# ---- STS --------------------------------------------------------------------------------------------------


def test_sts_formats_read_the_same_pairs(tmp_path):
    (tmp_path / "glue.tsv").write_text(GLUE_ROWS)
    pairs = load_sts_header(tmp_path / "glue.tsv")
    assert pairs == [Pair("A man plays.", "A man is playing.", 5.0), Pair("A dog.", 'A "cat.', 0.75),
                     Pair("It rains.", "It pours.", 3.0)]
    (tmp_path / "hf.csv").write_text('sentence1,sentence2,label\n"One, two.",Three.,2.5\n')
    assert load_sts_header(tmp_path / "hf.csv") == [Pair("One, two.", "Three.", 2.5)]
    (tmp_path / "s.csv.gz").write_bytes(gzip.compress(STSB_ROWS.encode()))
    assert load_sts_file(tmp_path / "s.csv.gz", "stsb")[0][1] == Pair("A dog runs.", 'A cat "sleeps.', 3.8)
    sick = tmp_path / "sick.txt"
    sick.write_text(SICK_ROWS)
    assert load_sts_file(sick, "sick", limit=2) == ([Pair("A boy runs.", "A kid runs.", 4.5),
                                                     Pair("A boy runs.", "A cat eats.", 1.2)], 0)


def test_semeval_skips_and_counts_empty_gold_lines(tmp_path):
    source = _semeval(tmp_path, "answers", ["a b\tc d", "e f\tg h\tsrc1\tsrc2", "i\tj", "k\tl"],
                      ["4.0", "", "  ", "1.5"])
    pairs, skipped = load_semeval(source)
    assert pairs == [Pair("a b", "c d", 4.0), Pair("k", "l", 1.5)] and skipped == 2
    assert load_semeval(tmp_path / "STS.gs.answers.txt") == (pairs, 2)  # named by its gold file
    assert load_semeval(source, limit=1) == ([Pair("a b", "c d", 4.0)], 0)  # stops before the empty gold lines


def test_sts_malformed_rows_name_file_and_line(tmp_path):
    _semeval(tmp_path, "bad", ["a\tb", "c\td", "e\tf"], ["1", "2"])
    with pytest.raises(ValueError, match=r"STS.gs.bad.txt:3: 2 gold lines for 3 input lines"):
        load_semeval(tmp_path / "STS.input.bad.txt")
    _semeval(tmp_path, "word", ["a\tb", "c\td"], ["1", "high"])
    with pytest.raises(ValueError, match=r"STS.gs.word.txt:2: gold score 'high' is not a number"):
        load_semeval(tmp_path / "STS.input.word.txt")
    _semeval(tmp_path, "one", ["a\tb", "just one sentence"], ["1", "2"])
    with pytest.raises(ValueError, match=r"STS.input.one.txt:2: expected two tab-separated sentences"):
        load_semeval(tmp_path / "STS.input.one.txt")
    (tmp_path / "STS.input.alone.txt").write_text("a\tb\n")
    with pytest.raises(FileNotFoundError, match=r"its gold file STS.gs.alone.txt is not beside it"):
        load_semeval(tmp_path / "STS.input.alone.txt")
    glue = tmp_path / "g.tsv"
    glue.write_text(GLUE_ROWS + "3\tx\ty\tz\t1\tnone\tnone\tA.\tB.\tnan\n")
    with pytest.raises(ValueError, match=r"g.tsv:5: score 'nan' is not a finite number"):
        load_sts_header(glue)
    glue.write_text(GLUE_ROWS + "3\tx\ty\n")
    with pytest.raises(ValueError, match=r"g.tsv:5: 3 columns, the header has 10"):
        load_sts_header(glue)
    glue.write_text("split\tscore\tsentence1\tsentence2\ntrain\t1\ta\tb\ntest\t2\tc\td\n")
    with pytest.raises(ValueError, match=r"g.tsv:1: a 'split' column with test, train: the splits would be pooled"):
        load_sts_header(glue)
    glue.write_text("index\tsentence1\tsentence2\n0\ta\tb\n")  # GLUE's test split: no gold
    with pytest.raises(ValueError, match=r"g.tsv:1: header lacks column\(s\) \['score'\]"):
        load_sts_header(glue)
    stsb = tmp_path / "s.csv"
    stsb.write_text(STSB_ROWS + "main\tx\t2012\t9\t2.0\tonly one sentence\n")
    with pytest.raises(ValueError, match=r"s.csv:4: expected at least 7 tab-separated columns, found 6"):
        load_stsb(stsb)


# ---- minimal pairs, CoLA, spelling ------------------------------------------------------------------------


def test_blimp_jsonl_gz(tmp_path):
    rows = [{"sentence_good": "the cats sleep", "sentence_bad": "the cats sleeps", "UID": "agr"},
            {"sentence_good": "a dog ran", "sentence_bad": "a dog rans"}]
    (tmp_path / "agr.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    (tmp_path / "island.jsonl").write_text(json.dumps(rows[0]) + "\n")
    assert [p.name for p in pair_files([tmp_path])] == ["agr.jsonl.gz", "island.jsonl"]
    assert [p.good for p in load_pairs(tmp_path / "agr.jsonl.gz")] == ["the cats sleep", "a dog ran"]
    (tmp_path / "bad.jsonl.gz").write_bytes(gzip.compress(b'{"sentence_good": "a", "sentence_bad": "b"}\n[1, 2]\n'))
    with pytest.raises(ValueError, match=r"bad.jsonl.gz:2: expected a JSON object"):
        load_pairs(tmp_path / "bad.jsonl.gz")


def test_cola_and_spelling_malformed_rows(tmp_path):
    cola = tmp_path / "dev.tsv"
    cola.write_text(COLA_ROWS + "\n")  # a trailing blank line is not a row
    assert len(load_cola(cola)) == 3
    cola.write_text(COLA_ROWS + "gj04\t1\tThe mark column is missing.\n")
    with pytest.raises(ValueError, match=r"dev.tsv:4: expected 4 tab-separated columns"):
        load_cola(cola)
    spelling = tmp_path / "rw.txt"
    spelling.write_text(ZESCH)
    assert [it.correct_sentence for it in load_rwse(spelling)] == ["the gaols of England", "a dig ran far"]
    spelling.write_text(ZESCH.replace("a dog ran far", "a cat ran far"))
    with pytest.raises(ValueError, match=r"rw.txt:13: the wrong word 'dog' does not occur in the sentence"):
        load_rwse(spelling)


# ---- N-best -----------------------------------------------------------------------------------------------


def test_nbest_both_layouts_read_the_same_lists(tmp_path):
    lists = {"u1": ("the cat sat", [("the cat sad", -1.0), ("the cat sat", -1.5)]),
             "u2": ("a dog", [("a dog", -2.0), ("a dock", -2.5), ("", -9.0)])}
    (tmp_path / "l.jsonl.gz").write_bytes(gzip.compress("".join(
        _nbest_record(u, ref, hyps, lm=False) + "\n" for u, (ref, hyps) in lists.items()).encode()))
    (tmp_path / "l.am.json").write_text(_mlm_scoring(lists))
    shared, mlm = load_nbest(tmp_path / "l.jsonl.gz"), load_nbest(tmp_path / "l.am.json")
    for a, b in zip(shared, mlm, strict=True):
        assert (a.utt_id, a.ref, a.texts) == (b.utt_id, b.ref, b.texts)
        np.testing.assert_array_equal(a.score, b.score)
    assert mlm[1].texts == ["a dog", "a dock", ""]
    assert len(load_nbest(tmp_path / "l.am.json", limit=1)) == 1
    with pytest.raises(ValueError, match=r"l.jsonl.gz:1: --first-pass am needs the first pass's own LM score"):
        evaluate_nbest({"x": shared}, lambda t: [0.0] * len(t), FirstPass.AM, weights=[0.0])


def test_nbest_malformed_entries_name_file_and_line(tmp_path):
    good = _mlm_scoring({"u1": ("a", [("a", -1.0)]), "u2": ("b", [("b", -1.0), ("c", -2.0)])})
    path = tmp_path / "m.json"
    path.write_text(good.replace('"hyp_2"', '"hyp_3"'))
    line = good.splitlines().index('  "u2": {') + 1
    with pytest.raises(ValueError, match=rf"m.json:{line}: utterance u2 is not an mlm-scoring N-best entry"):
        load_nbest(path)
    path.write_text(good.replace('"ref": "a"', '"rex": "a"'))
    with pytest.raises(ValueError, match=r"m.json:2: utterance u1 .*KeyError.*ref"):
        load_nbest(path, fmt="mlm-scoring")
    path.write_text(good[:-3])
    with pytest.raises(ValueError, match=r"m.json:\d+: invalid JSON"):
        load_nbest(path, fmt="mlm-scoring")
    jsonl = tmp_path / "n.jsonl"
    jsonl.write_text(_nbest_record("u", "A", [("A", -1.0)]) + "\n"
                     + _nbest_record("v", "B", [("B", -1.0)]).replace("-1.0", '"high"') + "\n")
    with pytest.raises(ValueError, match=r"n.jsonl:2: not an N-best record \(TypeError"):
        load_nbest(jsonl)


def test_nbest_one_or_three_lists():
    from maskplay.tasks.eval.nbest import Utterance

    def utt(ref, texts, scores):
        return Utterance("u", ref, texts, np.array(scores), np.zeros(len(texts)))

    lm = {"a b": 0.0, "a x": -5.0}
    one = [utt("A B", ["A X", "A B"], [-1.0, -1.5])]
    alone = evaluate_nbest({"only": one}, lambda t: [lm[x] for x in t], weights=[0.0, 1.0])["only"]
    assert alone["in_sample"] and alone["tuned_on"] == "only" and alone["reranked_wer"] == 0.0
    three = evaluate_nbest({"a": one, "b": one, "c": [utt("A X", ["A X", "A B"], [-1.0, -1.5])]},
                           lambda t: [lm[x] for x in t], weights=[0.0, 1.0])
    # a is tuned on b+c pooled: w=1 fixes b (+1 error) and breaks c (+1): a tie, the smaller weight wins
    assert three["a"]["tuned_on"] == "b+c" and three["a"]["weight"] == 0.0 and not three["a"]["in_sample"]
    assert three["c"]["tuned_on"] == "a+b" and three["c"]["weight"] == 1.0


# ---- end to end -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    tok = load_tokenizer(shared_path("tta-vocab"))
    return str(save_model_dir(tmp_path_factory.mktemp("m") / "tta", tiny("tta", tok), tok))


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    return tmp_path


def _run(args, capsys):
    code = main([*args, "--out", "results/r.json", "--precision", "fp32"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    text = Path("results/r.json").read_text()
    assert str(Path.cwd()) not in text  # no absolute machine paths
    return json.loads(text), captured.out


def test_eval_sts_files(model_dir, workdir, capsys):
    Path("data/glue.tsv").write_text(GLUE_ROWS)
    Path("data/sick.txt.gz").write_bytes(gzip.compress(SICK_ROWS.encode()))
    _semeval(workdir / "data", "answers", ["a man plays\ta man sings", "x\ty", "dogs bark\tcats meow", "it rains\tit pours"],
             ["4", "", "1", "2.5"])
    result, printed = _run(["eval", "sts", model_dir, "--file", "data/glue.tsv", "--file", str(workdir / "data/sick.txt.gz"),
                            "--file", "data/STS.gs.answers.txt"], capsys)
    r = result["results"]
    assert r["glue"]["format"] == "stsb-header" and r["glue"]["pairs"] == 3 and r["glue"]["file"] == "data/glue.tsv"
    assert r["sick"]["format"] == "sick" and r["sick"]["file"] == "data/sick.txt.gz"  # absolute made relative
    assert r["answers"]["pairs"] == 3 and r["answers"]["skipped_empty_gold"] == 1
    assert r["answers"]["file"] == "data/STS.input.answers.txt" and r["answers"]["gold_file"] == "data/STS.gs.answers.txt"
    assert result["files"] == ["data/glue.tsv", "data/sick.txt.gz", "data/STS.gs.answers.txt"]
    assert "1 pairs without a gold score skipped" in printed


def test_eval_nbest_files(model_dir, workdir, capsys):
    lists = {"u1": ("the cat sat", [("the cat sad", -1.0), ("the cat sat", -1.5)]),
             "u2": ("a dog ran", [("a dog ran", -2.0), ("a dock ran", -2.5)])}
    Path("data/dev.am.json").write_text(_mlm_scoring(lists))
    Path("data/test.jsonl").write_text("".join(_nbest_record(u, r.upper(), [(t.upper(), s) for t, s in h]) + "\n"
                                              for u, (r, h) in lists.items()))
    result, printed = _run(["eval", "nbest", model_dir, "--file", "data/dev.am.json", "--file", "data/test.jsonl",
                            "--weights", "0", "1"], capsys)
    r = result["results"]
    assert set(r) == {"dev.am", "test"} and r["test"]["tuned_on"] == "dev.am" and r["test"]["utterances"] == 2
    assert r["dev.am"]["one_best_wer"] == r["test"]["one_best_wer"] == pytest.approx(100 / 6)
    assert "your lists" in printed


def test_eval_pairs_cola_spelling_files(model_dir, workdir, capsys):
    Path("data/agr.jsonl.gz").write_bytes(gzip.compress(
        (json.dumps({"sentence_good": "the cats sleep .", "sentence_bad": "the cats sleeps ."}) + "\n").encode()))
    result, _ = _run(["eval", "pairs", model_dir, "--file", "data/agr.jsonl.gz"], capsys)
    assert result["results"]["files"]["agr"]["pairs"] == 1 and result["files"] == ["data/agr.jsonl.gz"]

    Path("data/train.tsv").write_text(COLA_ROWS)
    Path("data/dev.tsv").write_text(COLA_ROWS.replace("Dogs bark.", "Birds sing."))
    result, printed = _run(["eval", "cola", model_dir, "--file", "data/train.tsv", "--file", "data/dev.tsv"], capsys)
    r = result["results"]
    assert r["in_sample"] is True and r["train"]["sentences"] == 6 and r["data/train.tsv"]["sentences"] == 3
    assert "(in-sample)" in printed
    result, _ = _run(["eval", "cola", model_dir, "--file", "data/dev.tsv", "--tune-file", "data/train.tsv"], capsys)
    assert result["results"]["in_sample"] is False and result["tune_file"] == "data/train.tsv"

    Path("data/mine.txt").write_text(ZESCH)
    result, _ = _run(["eval", "spelling", model_dir, "--file", "data/mine.txt"], capsys)
    assert result["tune_on"] == "mine" and result["results"]["files"]["mine"]["items"] == 2


def test_eval_file_errors(model_dir, workdir, capsys):
    Path("data/sts.tsv").write_text(GLUE_ROWS + "3\tx\ty\tz\t1\tnone\tnone\tA.\tB.\tfive\n")
    assert main(["eval", "sts", model_dir, "--file", "data/sts.tsv"]) == 2
    assert capsys.readouterr().err.strip().endswith("data/sts.tsv:5: score 'five' is not a number")
    Path("data/p.jsonl").write_text('{"sentence_good": "a"}\n')
    assert main(["eval", "pairs", model_dir, "--file", "data/p.jsonl"]) == 2
    assert "data/p.jsonl:1: missing or non-string field(s) ['sentence_bad']" in capsys.readouterr().err
    Path("data/n.json").write_text("[]")
    assert main(["eval", "nbest", model_dir, "--file", "data/n.json", "--format", "mlm-scoring"]) == 2
    assert "data/n.json:1: expected one JSON object" in capsys.readouterr().err
    assert main(["eval", "nbest", model_dir, "--file", "data/n.json"]) == 2
    assert "cannot tell its format" in capsys.readouterr().err
    Path("data/c.tsv").write_text(COLA_ROWS.replace("\t1\t", "\tyes\t", 1))
    assert main(["eval", "cola", model_dir, "--file", "data/c.tsv"]) == 2
    assert "data/c.tsv:1: label 'yes' is not 0 or 1" in capsys.readouterr().err
    assert main(["eval", "spelling", model_dir, "--file", "data/c.tsv", "--tune-on", "other"]) == 2
    with pytest.raises(SystemExit):  # one source of data
        main(["eval", "cola", model_dir, "--file", "data/c.tsv", "--data", "data"])
    with pytest.raises(SystemExit):
        main(["eval", "sts", model_dir, "--file", "data/sts.tsv", "--format", "blimp"])


def test_the_shared_files_are_detected_as_what_they_are():
    cases = [("sts", ("stsbenchmark", "sts-dev.csv"), "stsb"), ("sts", ("sick", "SICK_train_trial.txt"), "sick"),
             ("cola", ("cola", "raw", "in_domain_dev.tsv"), "cola"),
             ("spelling", ("rwse-zesch2012", "en_natural_train.txt"), "zesch"),
             ("nbest", ("librispeech-nbest-espnet-hubert30", "dev_clean.jsonl.gz"), "jsonl")]
    for task, parts, fmt in cases:
        assert detect(task, shared_path(*parts)) == fmt, parts
