"""maskplay's lm-evaluation-harness backend (maskplay.tasks.lm_eval_backend, `maskplay lm-eval`), offline: lm-eval's
minimal-pair accuracy through the backend equals maskplay's own computation with Scorer on the same BLiMP pairs
(a causal and two bidirectional families); generate_until returns maskplay's generate text; GPT's
loglikelihood(context, continuation) equals a naive loop over the model's logits."""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from maskplay import preset
from maskplay.data.tokenizer import load_tokenizer
from maskplay.families import build_model
from maskplay.runtime.model_dir import resolve_model_dir
from maskplay.tasks.decoding import generate
from maskplay.tasks.score import Scorer
from maskplay.tasks.score.passes import Overflow
from tests.conftest import shared_path

pytest.importorskip("lm_eval", reason="lm-eval is an optional extra: pip install -e '.[lm-eval]'")

from lm_eval.api.instance import Instance  # noqa: E402

from maskplay.tasks.lm_eval_backend import TASKS_DIR, MaskplayLM, encode_pair  # noqa: E402

PARADIGMS = ("adjunct_island", "determiner_noun_agreement_1", "anaphor_gender_agreement")
PAIRS_PER_PARADIGM = 12
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def offline_datasets(tmp_path, monkeypatch):
    """datasets' cache in the test's folder, and no hub: the task must run offline."""
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _tokenizer():
    return load_tokenizer(resolve_model_dir("tta-mini-wiki") / "tokenizer.json")


def _random_bert():
    """A tiny random BERT that reads the bundled models' tokenizer."""
    torch.manual_seed(0)
    return build_model(preset("tiny", family="bert", vocab_size=_tokenizer().vocab_size, max_position=128)).eval()


def _lm(name: str, **kwargs) -> MaskplayLM:
    if name == "bert-random":
        return MaskplayLM(_random_bert(), tokenizer=_tokenizer(), device="cpu", precision="fp32", **kwargs)
    return MaskplayLM(name, device="cpu", precision="fp32", **kwargs)


def _request(kind: str, args: tuple, idx: int = 0) -> Instance:
    return Instance(request_type=kind, doc={}, arguments=args, idx=idx)


def _blimp_sample(tmp_path: Path) -> tuple[Path, list[tuple[str, dict]]]:
    """The first pairs of a few BLiMP paradigms in one JSONL.gz (under tmp_path, never in the repository)."""
    rows = []
    for paradigm in PARADIGMS:
        with gzip.open(shared_path("blimp-dev", f"{paradigm}.jsonl.gz"), "rt", encoding="utf-8") as f:
            for line in f.readlines()[:PAIRS_PER_PARADIGM]:
                rows.append((paradigm, json.loads(line)))
    path = tmp_path / "pairs.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for _, row in rows)
    return path, rows


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt-mini-wiki", "tta-mini-wiki", "bert-random"])
def test_pairs_accuracy_equals_scorer(name, tmp_path):
    import lm_eval
    from lm_eval.tasks import TaskManager

    path, rows = _blimp_sample(tmp_path)
    lm = _lm(name, batch_size=16)
    manager = TaskManager(include_path=str(TASKS_DIR), include_defaults=False, metadata={"pairs": str(path)})
    out = lm_eval.simple_evaluate(model=lm, tasks=["maskplay_pairs"], task_manager=manager, log_samples=True)
    samples = sorted(out["samples"]["maskplay_pairs"], key=lambda s: s["doc_id"])
    assert len(samples) == len(rows)

    # maskplay's own minimal-pair rule: the good sentence's total log p above the bad one's, straight from Scorer
    scorer = Scorer(lm.model, lm.tokenizer, method=lm.method, precision="fp32")
    goods = scorer.score([row["sentence_good"] for _, row in rows])
    bads = scorer.score([row["sentence_bad"] for _, row in rows])
    right = {p: 0 for p in PARADIGMS}
    for (paradigm, _), good, bad, sample in zip(rows, goods, bads, samples, strict=True):
        got = [float(r[0][0]) for r in sample["resps"]]  # lm-eval's (log p, is_greedy) of good, bad
        assert got == pytest.approx([good.log_prob, bad.log_prob], rel=1e-5, abs=1e-4)
        assert good.log_prob != bad.log_prob  # a tie would count as right in lm-eval, as wrong in maskplay
        right[paradigm] += good.log_prob > bad.log_prob
        assert sample["acc"] == float(good.log_prob > bad.log_prob)
    expected = sum(right.values()) / len(rows)
    assert out["results"]["maskplay_pairs"]["acc,none"] == pytest.approx(expected, abs=1e-12)
    for paradigm in PARADIGMS:  # and per paradigm
        docs = [s for (p, _), s in zip(rows, samples, strict=True) if p == paradigm]
        assert sum(s["acc"] for s in docs) == right[paradigm]


def _naive_gpt(model, tokenizer, context: str, continuation: str) -> tuple[float, bool]:
    """Sum of log softmax(logits at i - 1)[token i] over the continuation's pieces, one full forward pass."""
    enc, first = encode_pair(tokenizer, context, continuation)
    ids = [model.config.sos_token_id, *enc.ids, model.config.eos_token_id]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    total, greedy = 0.0, True
    for piece in range(first, len(enc.ids)):
        position = piece + 1
        row = logits[position - 1].log_softmax(-1)
        total += float(row[ids[position]])
        greedy = greedy and int(row.argmax()) == ids[position]
    return total, greedy


def test_gpt_loglikelihood_equals_naive_loop():
    lm = _lm("gpt-mini-wiki", batch_size=3)
    model, tokenizer = lm.model, lm.tokenizer
    # a continuation that is the model's own greedy next word, so that is_greedy is True at least once
    context = "the city is located in the"
    ids = [model.config.sos_token_id, *tokenizer.backend.encode(context, add_special_tokens=False).ids]
    with torch.no_grad():
        best = int(model(torch.tensor([ids])).logits[0, -1].argmax())
    word = tokenizer.backend.id_to_token(best)
    assert word.isalpha(), word
    pairs = [(context, f" {word}"), ("the cat sat on the", " mat ."), ("", "a whole sentence, no context."),
             ("the river flows into", " the northern sea"), ("interna", "tional")]
    got = lm.loglikelihood([_request("loglikelihood", pair, k) for k, pair in enumerate(pairs)])
    for pair, (value, greedy) in zip(pairs, got, strict=True):
        want, want_greedy = _naive_gpt(model, tokenizer, *pair)
        assert value == pytest.approx(want, rel=1e-5, abs=1e-5), pair
        assert greedy == want_greedy, pair
    assert got[0][1] is True
    assert lm.loglikelihood([_request("loglikelihood", ("the cat", "   "))]) == [(0.0, True)]  # nothing to score


def test_tta_continuation_is_its_pll_with_the_context_visible():
    """T-TA's one pass: each continuation piece from every other piece, the context's included."""
    lm = _lm("tta-mini-wiki")
    model, cfg = lm.model, lm.model.config
    context, continuation = "the cat sat on", " the mat"
    enc, first = encode_pair(lm.tokenizer, context, continuation)
    ids = torch.tensor([[cfg.sos_token_id, *enc.ids, cfg.eos_token_id]])
    with torch.no_grad():
        log_probs = model(ids).logits[0].float().log_softmax(-1)
    want = sum(float(log_probs[j + 1, enc.ids[j]]) for j in range(first, len(enc.ids)))
    (value, _), = lm.loglikelihood([_request("loglikelihood", (context, continuation))])
    assert value == pytest.approx(want, rel=1e-5)
    whole = lm.loglikelihood([_request("loglikelihood", ("", context + continuation))])[0][0]
    assert value > whole  # the context is given, not scored


@pytest.mark.parametrize("name", ["gpt-mini-wiki", "tta-mini-wiki"])
def test_rolling_equals_scorer_windows(name):
    lm = _lm(name, batch_size=8)
    long_text = " ".join(["the history of the city begins in the early middle ages ."] * 20)  # > 128 pieces
    texts = ["a short sentence .", long_text]
    got = lm.loglikelihood_rolling([_request("loglikelihood_rolling", (t,), k) for k, t in enumerate(texts)])
    want = Scorer(lm.model, lm.tokenizer, method=lm.method, overflow=Overflow.WINDOW, precision="fp32").score(texts)
    assert got == pytest.approx([s.log_prob for s in want], rel=1e-5)
    assert want[1].windows > 1


@pytest.mark.parametrize("name", ["gpt-mini-wiki", "unilm-titles-mini"])
def test_generate_until_equals_generate(name):
    lm = _lm(name)
    contexts = ["the history of the city", "in 1990 , the band released"]
    want = generate(lm.model, contexts, tokenizer=lm.tokenizer, max_new_tokens=10).texts
    requests = [_request("generate_until", (c, {"until": [], "max_gen_toks": 10, "do_sample": False}), k)
                for k, c in enumerate(contexts)]
    assert lm.generate_until(requests) == want
    # `until` cuts the text at the first stop string
    word = want[0].split()[2]
    cut = lm.generate_until([_request("generate_until", (contexts[0], {"until": [word], "max_gen_toks": 10}))])
    assert cut == [want[0][:want[0].index(word)]]


def test_generate_until_sampling_and_errors():
    lm = _lm("gpt-mini-wiki")
    kwargs = {"until": ["\n"], "max_gen_toks": 8, "do_sample": True, "temperature": 0.7, "top_k": 20, "seed": 3}
    got = lm.generate_until([_request("generate_until", ("the city", kwargs))])
    want = generate(lm.model, ["the city"], tokenizer=lm.tokenizer, max_new_tokens=8, strategy="sample",
                    temperature=0.7, top_k=20, seed=3).texts
    assert got == want
    with pytest.raises(ValueError, match="num_beams"):
        lm.generate_until([_request("generate_until", ("the city", {"num_beams": 4}))])
    with pytest.raises(ValueError, match="cannot generate"):
        _lm("tta-mini-wiki").generate_until([_request("generate_until", ("the city", {}))])
    with pytest.raises(ValueError, match="not maskplay's"):
        MaskplayLM("gpt-mini-wiki", device="cpu", dtype="float16")


def test_device_falls_back_to_cpu(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    lm = MaskplayLM("gpt-mini-wiki", device="cuda:0", precision="fp32")
    assert lm.device == torch.device("cpu")
    assert "running on the CPU" in capsys.readouterr().err


def test_command_line_argv():
    from maskplay.cli.lm_eval import lm_eval_argv

    assert lm_eval_argv(["--model", "maskplay"]) == ["run", "--model", "maskplay"]
    assert lm_eval_argv(["run", "--include_path", "mine"]) == ["run", "--include_path", "mine"]
    assert lm_eval_argv(["ls", "tasks"]) == ["ls", "tasks"]
    assert lm_eval_argv(["--help"]) == ["--help"]


def test_include_path_is_a_list_lm_eval_reads(tmp_path):
    """lm-eval 0.4.13 reads --include_path "a:b" as one folder, so maskplay hands its TaskManager a list: the user's
    folder(s) and its own; a task from each is found."""
    from lm_eval.tasks import TaskManager

    from maskplay.cli.lm_eval import include_paths

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "mine.yaml").write_text(f"task: my_pairs\ninclude: {TASKS_DIR / '_pairs_template_yaml'}\n")
    paths = include_paths(str(mine), str(TASKS_DIR))
    assert paths == [str(mine), str(TASKS_DIR)]
    assert include_paths(None, "T") == ["T"] and include_paths(f"{mine}:{mine}", "T") == [str(mine), str(mine), "T"]
    manager = TaskManager(include_path=paths, include_defaults=False)
    assert {"my_pairs", "maskplay_pairs"} <= set(manager.all_tasks)
    with pytest.raises(ValueError, match="no such directory"):
        include_paths(str(tmp_path / "nope"), "T")


def test_command_finds_tasks_in_the_users_folder_and_its_own(tmp_path, capsys):
    """`maskplay lm-eval validate --include_path DIR`: lm-eval's own command finds a task of DIR and maskplay_pairs
    (before, maskplay joined the two with ":", which lm-eval 0.4.13 read as one missing folder: "Tasks not found")."""
    from maskplay.cli import main

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "mine.yaml").write_text(f"task: my_pairs\ninclude: {TASKS_DIR / '_pairs_template_yaml'}\n")
    assert main(["lm-eval", "validate", "--tasks", "my_pairs,maskplay_pairs", "--include_path", str(mine)]) == 0
    assert "All tasks found and valid" in capsys.readouterr().out


@pytest.mark.heavy
@pytest.mark.slow
def test_command_runs_the_shipped_task(tmp_path):
    """`maskplay lm-eval` end to end: the sample pairs with the bundled GPT, results written by lm-eval."""
    env = {"PYTHONPATH": str(ROOT / "src"), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "maskplay", "lm-eval", "--model", "maskplay", "--model_args",
                          "pretrained=gpt-mini-wiki,precision=fp32", "--tasks", "maskplay_pairs", "--device", "cpu",
                          "--batch_size", "8", "--output_path", str(tmp_path / "out")],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    results = [json.loads(p.read_text()) for p in (tmp_path / "out").rglob("results_*.json")]
    assert len(results) == 1
    acc = results[0]["results"]["maskplay_pairs"]["acc,none"]
    lm = _lm("gpt-mini-wiki")
    sample = [json.loads(line) for line in (TASKS_DIR / "sample_pairs.jsonl").read_text().splitlines()]
    scores = lm.scorer.score([s for row in sample for s in (row["sentence_good"], row["sentence_bad"])])
    right = sum(scores[2 * k].log_prob > scores[2 * k + 1].log_prob for k in range(len(sample)))
    assert math.isclose(acc, right / len(sample))


def test_task_loader(tmp_path):
    """The task folder's loader (`custom_dataset: !function pairs.load`): the sample by default, a missing file named."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("maskplay_pairs_loader", TASKS_DIR / "pairs.py")
    loader = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loader)
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        loader.load(pairs=str(tmp_path / "nope.jsonl"))
    data = loader.load()
    assert len(data["train"]) == 10 and set(data["train"][0]) >= {"sentence_good", "sentence_bad"}
    gz = loader.load(pairs=str(shared_path("blimp-dev", "adjunct_island.jsonl.gz")))  # the json builder reads .gz
    assert len(gz["train"]) == 1000


def test_fused_method_scores_as_scorer():
    """GPT-BERT's fused method (causal + PLL log p of each piece): a continuation with an empty context is exactly
    Scorer's sentence score; is_greedy is the causal reading's (the flags of the pass that ran last)."""
    tokenizer = _tokenizer()
    torch.manual_seed(0)
    model = build_model(preset("tiny", family="gpt-bert", vocab_size=tokenizer.vocab_size, max_position=128)).eval()
    lm = MaskplayLM(model, tokenizer=tokenizer, method="fused", device="cpu", precision="fp32")
    texts = ["the cat sat on the mat .", "a river flows into the sea ."]
    got = lm.loglikelihood([_request("loglikelihood", ("", t), k) for k, t in enumerate(texts)])
    want = Scorer(model, tokenizer, method="fused", precision="fp32").score(texts)
    assert [v for v, _ in got] == pytest.approx([s.log_prob for s in want], rel=1e-6)
    # the model's own greedy continuation is greedy under the fused method too; another one is not
    own = generate(model, ["the cat"], tokenizer=tokenizer, max_new_tokens=3, stop_ids=()).generations[0]
    continuation = tokenizer.decode(own.token_ids)
    assert tokenizer.backend.encode("the cat " + continuation, add_special_tokens=False).ids[2:] == own.token_ids
    flags = [g for _, g in lm.loglikelihood([_request("loglikelihood", ("the cat", " " + continuation)),
                                              _request("loglikelihood", ("the cat", " sat on"), 1)])]
    assert flags == [True, False]
