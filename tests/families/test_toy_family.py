"""The family contract's proof: a family written here, in the test file, with no change to the package - a reverse
LM that predicts each token from the ones to its right - registers itself by subclassing, then pretrains with the
real training loop, scores, embeds, fine-tunes and draws its mask through the real library entry points. It has a
setting of its own (ReverseSettings, [model.reverse_test]), read from TOML, --set and config.json like a built-in
family's. ARCHITECTURE.md's "how to add a family" walks through this file."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from maskplay import preset
from maskplay.cli import main
from maskplay.config import ModelConfig, apply_overrides, from_dict
from maskplay.data.tokenizer import load_tokenizer
from maskplay.families import MaskplayModel, build_model
from maskplay.nn.masks import MaskPicture
from maskplay.nn.modeling import IGNORE_INDEX
from maskplay.nn.score_rules import ScoreRule
from maskplay.registry import FAMILIES, family_names
from maskplay.tasks.decoding import generate
from maskplay.tasks.finetune import DEFAULT_POOLING, Example, FinetuneOptions, HeadConfig, finetune
from maskplay.tasks.score import Embedder, Scorer
from maskplay.tasks.train import load_train_config, train
from tests.tasks.train.test_train import make_data, small_config

NAME = "reverse-test"
OWN_METHOD = "seen-token"


def right_of(reach: int | None = None):
    """Query i may see keys i and to its right (at most `reach` to its right): GPT's mask mirrored."""
    if reach is None:
        return lambda b, h, q, kv: kv >= q
    return lambda b, h, q, kv: (kv >= q) & (kv - q <= reach)


@dataclass
class ReverseSettings:
    """The toy family's own config section: [model.reverse_test] in a TOML file, "reverse_test" in config.json."""

    reach: int | None = None  # how many tokens to its right a query reads (None: to the end)

    def __post_init__(self) -> None:
        if self.reach is not None and self.reach < 1:
            raise ValueError(f"reverse_test.reach must be at least 1 (or left out), got {self.reach}")


@pytest.fixture(scope="module")
def reverse_lm():
    """Define and register the toy family (inside a fixture, so that it leaves the registry afterwards and no other
    test sees an extra family)."""

    class ReverseLM(MaskplayModel):
        """The output at position i has read tokens i.. and predicts token i - 1."""

        family = NAME
        settings = ReverseSettings
        # every piece from one pass, as T-TA and GPT score, read one output to its right; and a method of its own,
        # which no module of the package names: each piece from the output at its own position (which has read it)
        score_rules = (ScoreRule("one-pass", offset=1), ScoreRule(OWN_METHOD))
        default_pooling = "first"  # [SOS]'s output is the one that has read the whole sentence
        predicted_fraction = 1.0
        masks_shown = (MaskPicture(NAME, "reverse LM: right to left", lambda segments, rank: right_of()),)

        def forward(self, input_ids, attention_mask=None, labels=None, output_hidden_states=False):
            attention_mask = self.check_inputs(input_ids, attention_mask)
            h, states = self.encode_under(right_of(self.config.reverse_test.reach), input_ids, attention_mask,
                                          output_hidden_states=output_hidden_states)
            if labels is None:
                return self.output(h, None, states)
            out = self.output(h[:, 1:], labels[:, :-1].clone(), states)  # position i + 1 predicts token i
            out.last_hidden_state = h
            return out

        def num_targets(self, batch):
            return int((batch["labels"][:, :-1] != IGNORE_INDEX).sum())

    yield ReverseLM
    FAMILIES.pop(NAME)


@pytest.fixture(scope="module")
def trained(reverse_lm, tmp_path_factory):
    """A few steps of the real pretraining loop on a prepared corpus, then the exported model and its tokenizer."""
    root = tmp_path_factory.mktemp("toy")
    data = make_data(root / "data")
    result = train(small_config(data, root / "run", "model.reverse_test.reach=5", family=NAME))
    assert result.exit_code == 0 and result.final_dir is not None
    model = MaskplayModel.from_pretrained(result.final_dir).eval()
    return model, load_tokenizer(data / "tokenizer.json"), result


def test_the_family_registers_itself(reverse_lm):
    assert NAME in family_names()
    model = build_model(preset("tiny", family=NAME))
    assert type(model) is reverse_lm


def test_no_output_reads_a_token_to_its_left(reverse_lm):
    torch.manual_seed(0)
    model = build_model(preset("tiny", family=NAME, hidden_dropout=0.0, attention_dropout=0.0)).eval()
    ids = torch.randint(7, 100, (1, 9))
    emb = model.embed(ids).detach().requires_grad_(True)
    mask = torch.ones_like(ids, dtype=torch.bool)
    from maskplay.nn.masks import and_masks, materialize, padding

    attn = materialize(and_masks(right_of(), padding(mask)), 1, 9)
    h, _ = model.encoder(emb, attn)
    probe = torch.randn(h.shape[-1])  # a layer norm's outputs sum to a constant: read them through a projection
    for i in range(9):
        (grad,) = torch.autograd.grad((h[0, i] * probe).sum(), emb, retain_graph=True)
        seen = grad[0].abs().sum(-1) > 0
        assert not seen[:i].any(), f"output {i} depends on a token to its left"
        assert seen[i:].all()


def test_its_setting_reads_from_toml_and_config_json(reverse_lm, tmp_path):
    path = tmp_path / "train.toml"
    path.write_text(f'[model]\nfamily = "{NAME}"\npreset = "tiny"\n\n[model.reverse_test]\nreach = 2\n')
    section = load_train_config(path).model
    config = section.build({"vocab_size": 100})
    assert config.reverse_test == ReverseSettings(reach=2)
    assert config.to_dict()["reverse_test"] == {"reach": 2}
    assert from_dict(ModelConfig, config.to_dict()) == config
    assert apply_overrides(config, ["reverse_test.reach=4"]).reverse_test.reach == 4
    assert preset("tiny", family="gpt").reverse_test == ReverseSettings()  # every config holds every section
    path.write_text(f'[model]\nfamily = "{NAME}"\n\n[model.reverse_test]\nreach = 0\n')
    with pytest.raises(ValueError, match="reverse_test.reach must be at least 1"):
        load_train_config(path)


def test_its_setting_changes_what_it_reads(reverse_lm):
    """reach = 2, two layers: each layer reads 2 tokens further right, so output i reads tokens i..i + 4, none
    further right (without the setting, every token to its right)."""
    torch.manual_seed(0)
    model = build_model(preset("tiny", family=NAME, hidden_dropout=0.0, attention_dropout=0.0,
                               reverse_test=ReverseSettings(reach=2))).eval()
    ids = torch.randint(7, 100, (1, 8))
    outputs = []  # the embeddings' output, which the gradients below are taken against
    handle = model.embeddings.register_forward_hook(lambda module, args, out: outputs.append(out))
    h = model(ids).last_hidden_state
    handle.remove()
    (embedded,) = outputs
    probe = torch.randn(h.shape[-1])
    for i in range(8):
        (grad,) = torch.autograd.grad((h[0, i] * probe).sum(), embedded, retain_graph=True)
        seen = (grad[0].abs().sum(-1) > 0).nonzero().flatten().tolist()
        assert seen == list(range(i, min(i + 2 * 2 + 1, 8))), f"output {i} reads {seen}"


def test_it_pretrains_with_the_training_loop(trained, reverse_lm):
    model, _, result = trained
    assert type(model) is reverse_lm
    assert model.config.reverse_test.reach == 5  # --set model.reverse_test.reach, through config.json
    assert result.eval_loss is not None and math.isfinite(result.eval_loss)
    assert (Path(result.final_dir) / "model.safetensors").is_file()


def test_it_scores_as_a_naive_loop_does(trained):
    model, tok, _ = trained
    scores = Scorer(model, tok).score(["w10 w11 w12 w13", "w40 w7 w99"])
    assert [s.method for s in scores] == ["one-pass", "one-pass"]
    for score in scores:
        ids = torch.tensor([[model.config.sos_token_id, *score.token_ids, model.config.eos_token_id]])
        with torch.no_grad():
            log_probs = model(ids).logits.log_softmax(-1)[0]
        # piece k (at position k + 1 after [SOS]) is predicted by the output one to its right
        naive = [float(log_probs[k + 2, ids[0, k + 1]]) for k in range(ids.shape[1] - 2)]
        assert score.token_log_probs == pytest.approx(naive, abs=1e-5)


def test_its_own_scoring_rule_runs_through_the_scorer_and_the_command_line(trained, tmp_path):
    """A method declared in the family's class alone: the scorer runs it by its rule (no branch of its own), and
    `maskplay score --method` offers it."""
    model, tok, result = trained
    sentences = ["w10 w11 w12 w13", "w40 w7 w99"]
    scores = Scorer(model, tok, method=OWN_METHOD).score(sentences)
    assert [s.method for s in scores] == [OWN_METHOD] * 2
    for score in scores:
        ids = torch.tensor([[model.config.sos_token_id, *score.token_ids, model.config.eos_token_id]])
        with torch.no_grad():
            log_probs = model(ids).logits.log_softmax(-1)[0]
        naive = [float(log_probs[k + 1, ids[0, k + 1]]) for k in range(ids.shape[1] - 2)]  # the piece's own output
        assert score.token_log_probs == pytest.approx(naive, abs=1e-5)
    assert scores[0].log_prob != pytest.approx(Scorer(model, tok).score(sentences[:1])[0].log_prob)
    out = tmp_path / "scores.jsonl"
    assert main(["score", str(result.final_dir), *sentences, "--method", OWN_METHOD, "--format", "jsonl",
                 "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["method"] for r in rows] == [OWN_METHOD] * 2
    assert [r["log_prob"] for r in rows] == pytest.approx([s.log_prob for s in scores], abs=1e-4)
    with pytest.raises(ValueError, match=f"method {OWN_METHOD!r} does not apply to a 'bert' model"):
        Scorer(build_model(preset("tiny", family="bert")), tok, method=OWN_METHOD)
    # and `maskplay eval` takes it: the pair is right where the rule's sentence log p says so
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"sentence_good": sentences[0], "sentence_bad": sentences[1]}) + "\n"
                     + json.dumps({"sentence_good": sentences[1], "sentence_bad": sentences[0]}) + "\n")
    report = tmp_path / "pairs.json"
    assert main(["eval", "pairs", str(result.final_dir), "--data", str(pairs), "--method", OWN_METHOD,
                 "--normalize", "sum", "--out", str(report)]) == 0
    evaluated = json.loads(report.read_text())
    assert evaluated["method"] == OWN_METHOD
    assert evaluated["results"]["accuracy"] == 50.0  # exactly one of the two orders has the higher log p first


def test_it_embeds_and_fine_tunes(trained):
    model, tok, _ = trained
    vectors = Embedder(model, tok).encode(["w10 w11 w12", "w50 w51"])
    assert vectors.shape == (2, model.config.hidden_size) and np.isfinite(vectors).all()
    assert not np.allclose(vectors[0], vectors[1])
    rows = [Example(f"w{10 + k} w{20 + k}", None, str(k % 2), f"toy:{k}") for k in range(16)]
    head = HeadConfig(labels=["0", "1"], pooling=DEFAULT_POOLING[NAME])
    assert head.pooling == "first"
    before = model.embeddings.word.weight.detach().clone()
    result = finetune(model, tok, head, rows[:12], rows[12:], FinetuneOptions(epochs=1, batch_size=4, lr=1e-3))
    assert result.steps == 3 and math.isfinite(result.best["train_loss"]) and "dev_mcc" in result.best
    assert type(result.model.backbone) is type(model)
    assert not torch.equal(result.model.backbone.embeddings.word.weight, before)  # the backbone was trained too


def test_the_commands_know_it(reverse_lm, tmp_path):
    assert main(["masks", "--family", NAME, "--length", "5", "--out", str(tmp_path / "mask.png")]) == 0
    assert (tmp_path / "mask.png").stat().st_size > 0
    model = build_model(preset("tiny", family=NAME))
    with pytest.raises(ValueError, match="cannot generate text.*families that can: gpt, gpt-bert, unilm"):
        generate(model, [[3, 10, 11]], max_new_tokens=2)
