"""Generation: the key/value cache against full forward passes, the three strategies on hand-checked cases,
logits filtering against a naive reference, truncation, empty inputs, the CLI, and the families that cannot
generate."""

from __future__ import annotations

import json
import math
import warnings

import pytest
import torch
from torch import Tensor

from maskplay import GPT, BertMLM, preset
from maskplay.cli import main
from maskplay.nn.cache import KVCache
from maskplay.nn.generation_hooks import forward_cached, last_real
from maskplay.nn.masks import and_masks, materialize, padding, prefix_lm
from maskplay.tasks.decoding import filter_logits, generate, generating_families
from tests.tasks.score.test_score_support import one_thread, save_model_dir, small_tokenizer, tiny  # noqa: F401 (autouse fixture)

ATOL = 1e-5


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return small_tokenizer(tmp_path_factory.mktemp("vocab"))


@pytest.fixture(scope="module")
def gpt(tok):
    return tiny("gpt", tok)


def prompts_of(lengths: list[int], sos: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [[sos, *torch.randint(7, 60, (n - 1,), generator=g).tolist()] for n in lengths]


# ---- the cache ----------------------------------------------------------------------------------------------


def test_prefill_and_steps_equal_the_full_forward(gpt):
    """Prompts right-padded, then three tokens one step at a time: every next-token logit equals GPT.forward's
    at that position of the whole sequence."""
    prompts = prompts_of([7, 3, 5], gpt.config.sos_token_id)
    extra = torch.randint(7, 60, (3, 3), generator=torch.Generator().manual_seed(1))
    width = max(map(len, prompts))
    ids = torch.zeros(3, width, dtype=torch.long)
    for k, p in enumerate(prompts):
        ids[k, :len(p)] = torch.tensor(p)
    with torch.no_grad():
        cache, logits = gpt.prefill(ids, ids != 0)
        got = [logits] + [gpt.step(extra[:, t:t + 1], cache) for t in range(3)]
        for k, p in enumerate(prompts):
            full = torch.tensor([p + extra[k].tolist()])
            want = gpt(full).logits[0, len(p) - 1:]
            torch.testing.assert_close(torch.stack([g[k] for g in got]), want, atol=ATOL, rtol=ATOL)


def test_step_with_several_tokens_equals_one_at_a_time(gpt):
    ids = torch.tensor([prompts_of([6], gpt.config.sos_token_id)[0]])
    new = torch.tensor([[11, 12, 13]])
    with torch.no_grad():
        cache, _ = gpt.prefill(ids)
        at_once = gpt.step(new, cache)
        cache, _ = gpt.prefill(ids)
        for t in range(3):
            one = gpt.step(new[:, t:t + 1], cache)
    torch.testing.assert_close(at_once, one, atol=ATOL, rtol=ATOL)


def test_cache_mask_positions_growth_and_reorder():
    cache = KVCache(num_layers=1, capacity=2)
    positions, mask = cache.extend(torch.tensor([[False, True, True], [True, True, True]]))
    assert positions.tolist() == [[0, 0, 1], [0, 1, 2]]  # a hole gets position 0
    # brute force: new token i sees new keys j <= i that are real
    want = torch.tensor([[[0, 0, 0], [0, 1, 0], [0, 1, 1]], [[1, 0, 0], [1, 1, 0], [1, 1, 1]]], dtype=torch.bool)
    assert torch.equal(mask[:, 0], want)
    k = torch.arange(2 * 1 * 3 * 2, dtype=torch.float).view(2, 1, 3, 2)
    keys, _ = cache.append(0, k, k)
    assert torch.equal(keys, k) and cache.capacity >= 3
    positions, mask = cache.extend(torch.tensor([[True], [False]]))
    assert positions.tolist() == [[2], [0]]
    assert mask[:, 0, 0].tolist() == [[False, True, True, True], [True, True, True, False]]
    cache.append(0, torch.full((2, 1, 1, 2), -1.0), torch.full((2, 1, 1, 2), -1.0))
    cache.reorder(torch.tensor([1, 1, 0]))
    assert cache.next_position.tolist() == [3, 3, 3]
    assert torch.equal(cache.keys[0][2, :, :3], k[0])
    with pytest.raises(ValueError, match="reserved columns"):
        cache.append(0, k, k)


class PrefixLM(BertMLM):
    """A seq2seq family as UniLM builds one (BERT weights, segment 0 = source, 1 = target): the hooks a family
    writes on forward_cached, here to test the cache under a prefix mask and the `generated_token_type` path."""

    generated_token_type = 1

    def prefill(self, input_ids, attention_mask=None, token_type_ids=None):
        mask = (input_ids != 0) if attention_mask is None else attention_mask.bool()
        types = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
        within = materialize(prefix_lm(types), *input_ids.shape, device=input_ids.device)
        cache = KVCache(self.config.num_layers)
        h = forward_cached(self, input_ids, mask, cache, token_type_ids=types, within=within)
        return cache, self.logits(last_real(h, mask))

    def step(self, new_ids, cache, new_mask=None):
        new_mask = torch.ones_like(new_ids, dtype=torch.bool) if new_mask is None else new_mask
        h = forward_cached(self, new_ids, new_mask, cache, token_type_ids=torch.ones_like(new_ids))
        return self.logits(last_real(h, new_mask))


@pytest.fixture(scope="module")
def prefix_lm_model(tok):
    model = PrefixLM(tiny("bert", tok, type_vocab_size=2).config)
    model.load_state_dict(tiny("bert", tok, type_vocab_size=2).state_dict())
    return model.eval()


def test_a_prefix_mask_family_matches_its_full_forward(prefix_lm_model):
    """Sources computed bidirectionally once, targets one step at a time: every next-token logit equals a full
    forward of source + target under the seq2seq mask (masks.prefix_lm) with segments 0/1."""
    model = prefix_lm_model
    sources = prompts_of([6, 3], model.config.sos_token_id, seed=4)
    targets = torch.randint(7, 60, (2, 4), generator=torch.Generator().manual_seed(5))
    ids = torch.zeros(2, 6, dtype=torch.long)
    ids[0], ids[1, 3:] = torch.tensor(sources[0]), torch.tensor(sources[1])  # left padding
    with torch.no_grad():
        cache, logits = model.prefill(ids, ids != 0)
        got = [logits] + [model.step(targets[:, t:t + 1], cache) for t in range(4)]
        for k, source in enumerate(sources):
            full = torch.tensor([source + targets[k].tolist()])
            types = (torch.arange(full.shape[1]) >= len(source)).long()[None]
            mask = materialize(and_masks(prefix_lm(types), padding(full != 0)), 1, full.shape[1])
            h, _ = model.encoder(model.embed(full, types), mask)
            want = model.logits(h[0, len(source) - 1:])
            torch.testing.assert_close(torch.stack([g[k] for g in got]), want, atol=ATOL, rtol=ATOL)


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_a_prefix_mask_family_generates_the_same_with_and_without_cache(prefix_lm_model, strategy):
    sources = prompts_of([7, 2, 4], prefix_lm_model.config.sos_token_id, seed=6)
    runs = [generate(prefix_lm_model, sources, max_new_tokens=6, strategy=strategy, num_beams=2, stop_ids=[],
                     output_logits=True, use_cache=cache) for cache in (True, False)]
    for cached, uncached in zip(*runs, strict=True):
        assert cached.token_ids == uncached.token_ids
        finite = torch.isfinite(cached.logits)
        torch.testing.assert_close(cached.logits[finite], uncached.logits[finite], atol=ATOL, rtol=ATOL)


# ---- cached vs uncached -------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_cached_and_uncached_generation_agree(gpt, strategy, padding_side):
    prompts = prompts_of([9, 2, 5, 4], gpt.config.sos_token_id)
    runs = [generate(gpt, prompts, max_new_tokens=8, strategy=strategy, num_beams=3, seed=7, top_k=20, top_p=0.9,
                     temperature=0.8, stop_ids=[1, 6], padding_side=padding_side, output_logits=True, use_cache=cache)
            for cache in (True, False)]
    assert sum(len(g.token_ids) for g in runs[0]) > 8  # something was generated
    for cached, uncached in zip(*runs, strict=True):
        assert cached.token_ids == uncached.token_ids
        assert cached.finish_reason == uncached.finish_reason
        assert cached.logits.shape == uncached.logits.shape
        finite = torch.isfinite(cached.logits)
        torch.testing.assert_close(cached.logits[finite], uncached.logits[finite], atol=ATOL, rtol=ATOL)
        assert math.isclose(cached.log_prob, uncached.log_prob, abs_tol=1e-4)


@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_a_batch_generates_what_each_prompt_generates_alone(gpt, padding_side):
    prompts = prompts_of([9, 2, 5, 4], gpt.config.sos_token_id, seed=3)
    together = generate(gpt, prompts, max_new_tokens=10, stop_ids=[1], padding_side=padding_side)
    for prompt, g in zip(prompts, together, strict=True):
        assert generate(gpt, [prompt], max_new_tokens=10, stop_ids=[1]).generations[0].token_ids == g.token_ids
    beams = generate(gpt, prompts, max_new_tokens=6, strategy="beam", num_beams=3, padding_side=padding_side)
    for prompt, g in zip(prompts, beams, strict=True):
        alone = generate(gpt, [prompt], max_new_tokens=6, strategy="beam", num_beams=3)[0]
        assert alone.token_ids == g.token_ids and math.isclose(alone.score, g.score, abs_tol=1e-4)


def test_a_padded_tensor_is_read_through_its_attention_mask(gpt):
    prompts = prompts_of([6, 3], gpt.config.sos_token_id)
    ids = torch.tensor([prompts[0], [0, 0, 0, *prompts[1]]])  # left-padded
    got = gpt.generate(ids, attention_mask=ids != 0, max_new_tokens=5, stop_ids=[])
    want = generate(gpt, prompts, max_new_tokens=5, stop_ids=[])
    assert [g.token_ids for g in got] == [g.token_ids for g in want]


# ---- strategies on a model whose next-token distribution is scripted -----------------------------------------

S, EOS, A, B, X, Y, Z = 3, 1, 7, 8, 9, 10, 11


class Scripted(GPT):
    """Next-token probabilities depend on the last token only (TABLE); hooks overridden, no network."""

    table: dict[int, dict[int, float]] = {}

    def _logits(self, last: Tensor) -> Tensor:
        out = torch.full((last.shape[0], self.config.vocab_size), float("-inf"))
        for row, token in enumerate(last.tolist()):
            for nxt, p in self.table[token].items():
                out[row, nxt] = math.log(p)
        return out

    def prefill(self, input_ids, attention_mask=None, token_type_ids=None):
        mask = (input_ids != 0) if attention_mask is None else attention_mask.bool()
        last = input_ids[torch.arange(len(input_ids)), mask.shape[1] - 1 - mask.flip(1).int().argmax(1)]
        cache = KVCache(0)
        cache.extras["last"] = last
        return cache, self._logits(last)

    def step(self, new_ids, cache, new_mask=None):
        last = torch.where(new_mask[:, -1], new_ids[:, -1], cache.extras["last"])
        cache.extras["last"] = last
        return self._logits(last)


def scripted(table: dict[int, dict[int, float]]) -> Scripted:
    model = Scripted(preset("tiny", family="gpt"))
    model.table = table
    return model.eval()


GREEDY_VS_BEAM = {S: {A: 0.6, B: 0.4}, A: {X: 0.4, Y: 0.3, Z: 0.3}, B: {EOS: 0.9, X: 0.1}, X: {EOS: 1.0},
                  Y: {EOS: 1.0}, Z: {EOS: 1.0}}


@pytest.mark.parametrize("use_cache", [True, False])
def test_beam_search_finds_what_greedy_misses(use_cache):
    """Greedy: S -> A (0.6) -> X (0.4) -> EOS, p = 0.24. Beam (2 beams, no length penalty): B (0.4) -> EOS (0.9),
    p = 0.36: after step 2 the beams are A X (0.24) and A Y (0.18) beside the finished B EOS (0.36)."""
    model = scripted(GREEDY_VS_BEAM)
    greedy = generate(model, [[S]], max_new_tokens=5, use_cache=use_cache)[0]
    assert greedy.token_ids == [A, X] and greedy.finish_reason == "stop" and greedy.stop_id == EOS
    assert math.isclose(greedy.log_prob, math.log(0.24), rel_tol=1e-6)
    beam = generate(model, [[S]], max_new_tokens=5, strategy="beam", num_beams=2, length_penalty=0.0,
                    use_cache=use_cache)[0]
    assert beam.token_ids == [B] and beam.finish_reason == "stop"
    assert math.isclose(beam.log_prob, math.log(0.36), rel_tol=1e-6)


def test_length_penalty_favours_longer_hypotheses():
    """Normalised by length ** 1: B EOS scores log(0.36) / 2 = -0.511, A X EOS log(0.24) / 3 = -0.476."""
    model = scripted(GREEDY_VS_BEAM)
    beam = generate(model, [[S]], max_new_tokens=5, strategy="beam", num_beams=2, length_penalty=1.0)[0]
    assert beam.token_ids == [A, X]
    assert math.isclose(beam.score, math.log(0.24) / 3, rel_tol=1e-6)


def test_early_stopping_ends_with_num_beams_hypotheses():
    """A -> EOS (p 0.6, normalised -0.255) and B -> EOS (0.2, -0.805) finish at step 2; B X X ... never ends, and
    with length_penalty 1 its score log(0.2) / n rises above -0.255 by n = 7. Early stopping returns A; without it
    the search runs to max_new_tokens and the long hypothesis wins."""
    model = scripted({S: {A: 0.6, B: 0.4}, A: {EOS: 1.0}, B: {EOS: 0.5, X: 0.5}, X: {X: 1.0}})
    early = generate(model, [[S]], max_new_tokens=10, strategy="beam", num_beams=2, early_stopping=True,
                     output_logits=True)[0]
    assert early.token_ids == [A] and early.logits.shape[0] == 2
    late = generate(model, [[S]], max_new_tokens=10, strategy="beam", num_beams=2, output_logits=True)[0]
    assert late.token_ids == [B] + [X] * 9 and late.finish_reason == "length" and late.logits.shape[0] == 10
    assert math.isclose(late.score, math.log(0.2) / 10, rel_tol=1e-6)


def test_stop_tokens_end_each_row_on_its_own():
    model = scripted({S: {A: 1.0}, 5: {B: 1.0}, A: {EOS: 1.0}, B: {Y: 1.0}, Y: {Y: 0.9, 6: 0.1}, EOS: {EOS: 1.0}})
    out = generate(model, [[S], [5]], max_new_tokens=4, stop_ids=[EOS])
    assert [g.token_ids for g in out] == [[A], [B, Y, Y, Y]]  # the stop token is not part of the output
    assert [g.finish_reason for g in out] == ["stop", "length"] and out[0].stop_id == EOS
    assert generate(model, [[5]], max_new_tokens=4, stop_ids=[Y])[0].token_ids == [B]
    assert generate(model, [[S]], max_new_tokens=4, stop_ids=[])[0].finish_reason == "length"
    # beam search ends as soon as no beam can go on (here every candidate but the stop has probability 0)
    ended = generate(scripted({S: {EOS: 1.0}}), [[S]], max_new_tokens=6, strategy="beam", num_beams=2,
                     output_logits=True)[0]
    assert ended.token_ids == [] and ended.finish_reason == "stop" and ended.logits.shape[0] == 1


# ---- sampling -----------------------------------------------------------------------------------------------


def test_sampling_is_reproducible_with_a_seed(gpt):
    prompts = prompts_of([4, 6], gpt.config.sos_token_id)
    state = torch.random.get_rng_state()
    runs = [[g.token_ids for g in generate(gpt, prompts, max_new_tokens=12, strategy="sample", seed=seed,
                                           stop_ids=[])] for seed in (5, 5, 6)]
    assert runs[0] == runs[1] and runs[0] != runs[2]
    assert torch.equal(torch.random.get_rng_state(), state)  # the global generator is left alone


def test_sampling_follows_the_filtered_distribution():
    """top_k=2 on 0.5/0.3/0.2: tokens drawn in proportion 5:3, never the third."""
    model = scripted({S: {A: 0.5, B: 0.3, X: 0.2}, A: {EOS: 1.0}, B: {EOS: 1.0}, X: {EOS: 1.0}})
    out = generate(model, [[S]] * 800, max_new_tokens=1, strategy="sample", top_k=2, seed=0, batch_size=800)
    firsts = [g.token_ids[0] for g in out]
    assert X not in firsts
    assert abs(firsts.count(A) / 800 - 0.625) < 0.05


def naive_filter(logits: list[float], temperature: float, top_k: int, top_p: float) -> list[float]:
    scaled = [v / temperature for v in logits]
    order = sorted(range(len(scaled)), key=lambda i: -scaled[i])
    keep = set(order[:top_k]) if top_k else set(order)
    kept = [i for i in order if i in keep]
    z = sum(math.exp(scaled[i]) for i in kept)
    nucleus, total = [], 0.0
    for i in kept:
        if total >= top_p:
            break
        nucleus.append(i)
        total += math.exp(scaled[i]) / z
    return [scaled[i] if i in nucleus else -math.inf for i in range(len(scaled))]


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (0.7, 3, 1.0), (1.0, 0, 0.6), (1.3, 5, 0.8),
                                                     (1.0, 0, 0.05), (2.0, 1, 0.5)])
def test_filter_logits_matches_a_naive_reference(temperature, top_k, top_p):
    logits = torch.randn(4, 12, generator=torch.Generator().manual_seed(top_k))
    got = filter_logits(logits, temperature, top_k, top_p)
    for row in range(4):
        want = torch.tensor(naive_filter(logits[row].tolist(), temperature, top_k, top_p))
        assert torch.equal(torch.isinf(got[row]), torch.isinf(want))
        finite = torch.isfinite(want)
        torch.testing.assert_close(got[row][finite], want[finite])


# ---- inputs -------------------------------------------------------------------------------------------------


def test_long_prompts_are_cut_from_the_left_with_a_count(gpt, tok):
    long = " ".join(["cat"] * 80)
    with pytest.warns(UserWarning, match="1 of 3 inputs"):
        out = generate(gpt, ["a dog", long, "the mat"], tokenizer=tok, max_new_tokens=4, stop_ids=[])
    assert out.truncated == 1 and [g.truncated for g in out] == [0, 80 + 1 - (64 - 4), 0]
    cut = [tok.special.sos, *tok.backend.encode(long, add_special_tokens=False).ids[-(64 - 4 - 1):]]
    assert out[1].token_ids == generate(gpt, [cut], max_new_tokens=4, stop_ids=[])[0].token_ids
    with pytest.raises(ValueError, match="leaves no room for a prompt"):
        generate(gpt, ["a"], tokenizer=tok, max_new_tokens=64)


def test_empty_inputs_give_empty_outputs_in_place(gpt, tok):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = generate(gpt, ["the cat", "", "   ", "a dog"], tokenizer=tok, max_new_tokens=3, stop_ids=[])
    assert len(out) == 4
    assert [g.finish_reason for g in out] == ["length", "empty", "empty", "length"]
    assert out[1].text == "" and out[1].token_ids == [] and len(out[0].token_ids) == 3
    assert out[3].text == tok.decode(out[3].token_ids)


@pytest.mark.parametrize("family", ["tta", "bert", "electra"])
def test_families_that_cannot_generate_say_which_can(tok, family):
    model = tiny(family, tok)
    with pytest.raises(ValueError, match=rf"a '{family}' model cannot generate text.*families that can: .*gpt"):
        model.generate(["the cat"], tokenizer=tok)
    assert "gpt" in generating_families() and family not in generating_families()


def test_bad_options_are_errors(gpt):
    for options, message in [({"strategy": "nucleus"}, "strategy"), ({"top_p": 0.0}, "top_p"),
                             ({"temperature": 0.0}, "temperature"), ({"num_beams": 0}, "num_beams"),
                             ({"max_new_tokens": -1}, "max_new_tokens")]:
        with pytest.raises(ValueError, match=message):
            generate(gpt, [[3, 9]], **options)
    with pytest.raises(ValueError, match="out of range"):
        generate(gpt, [[3, 1000]])
    with pytest.raises(ValueError, match="need a tokenizer"):
        generate(gpt, ["text"])


def test_forward_cached_refuses_to_run_past_the_positions(gpt):
    cache = KVCache(gpt.config.num_layers)
    with torch.no_grad(), pytest.raises(ValueError, match="64 positions"):
        forward_cached(gpt, torch.full((1, 65), 9), torch.ones(1, 65, dtype=torch.bool), cache)


# ---- the command line ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tok, gpt):
    return save_model_dir(tmp_path_factory.mktemp("gpt"), gpt, tok)


def test_cli_generates_like_the_python_api(model_dir, tmp_path, capsys, gpt, tok):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the cat sat\n\na dog ran\n" + " ".join(["mat"] * 70) + "\n")
    code = main(["generate", str(model_dir), "--file", str(prompts), "--max-new-tokens", "5", "--format", "jsonl",
                 "--stop", "[EOS]"])
    captured = capsys.readouterr()
    assert code == 0
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert len(rows) == 4 and rows[1]["finish_reason"] == "empty" and rows[1]["text"] == ""
    assert rows[3]["truncated"] > 0 and "1 truncated from the left" in captured.err and "1 empty" in captured.err
    want = generate(gpt, ["the cat sat", "a dog ran"], tokenizer=tok, max_new_tokens=5, stop_ids=[tok.special.eos])
    assert [rows[0]["token_ids"], rows[2]["token_ids"]] == [g.token_ids for g in want]
    assert main(["generate", str(model_dir), "--file", str(prompts), "--max-new-tokens", "5", "--stop", "[EOS]"]) == 0
    plain = capsys.readouterr().out.split("\n")
    assert plain[:4] == [r["text"] for r in rows]


def test_cli_sampling_with_a_seed_and_streaming(model_dir, capsys):
    args = ["generate", str(model_dir), "the cat", "--strategy", "sample", "--seed", "3", "--top-k", "10",
            "--max-new-tokens", "8", "--stop", "[PAD]"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main([*args, "--stream", "always"]) == 0
    assert capsys.readouterr().out.strip() == first.strip() != ""


def test_cli_errors_are_one_line(model_dir, tmp_path, capsys, tok):
    assert main(["generate", str(model_dir), "x", "--file", "f.txt"]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["generate", str(model_dir), "--file", str(tmp_path / "missing.txt")]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["generate", str(model_dir), "x", "--stop", "[NOPE]"]) == 2
    assert "[NOPE]" in capsys.readouterr().err
    tta_dir = save_model_dir(tmp_path / "tta", tiny("tta", tok), tok)
    assert main(["generate", str(tta_dir), "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot generate" in err and "gpt" in err


@pytest.mark.parametrize("precision,tolerance", [("bf16", 0.05), ("int8", 0.05)])
def test_reduced_precision_copies_generate_close_to_fp32(gpt, precision, tolerance):
    from maskplay.cli.generate import for_precision
    from maskplay.runtime.quant import FULL_RANGE, kernel_weight_range

    if precision == "int8" and kernel_weight_range() < FULL_RANGE:
        tolerance *= 1.6  # a CPU without VNNI: 7-bit weights (maskplay.runtime.quant), about twice the rounding step
    prompts = prompts_of([5, 8], gpt.config.sos_token_id)
    want = generate(gpt, prompts, max_new_tokens=1, output_logits=True)
    got = generate(for_precision(gpt, precision), prompts, max_new_tokens=4, output_logits=True, stop_ids=[])
    assert all(len(g.token_ids) == 4 for g in got) and next(gpt.parameters()).dtype == torch.float32
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.logits[0], w.logits[0], atol=tolerance * w.logits[0].abs().max().item(), rtol=0)
