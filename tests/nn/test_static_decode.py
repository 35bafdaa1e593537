"""The static cache and the compiled decode step (maskplay.nn.static_decode, generate(compile=True)) against the plain
cached path: the same tokens and the same logits, for every family that generates."""

import pytest
import torch

from maskplay import preset
from maskplay.families import build_model
from maskplay.nn.cache import KVCache, StaticKVCache
from maskplay.nn.static_decode import CAPACITY_STEP, _run_greedy_step, static_step
from maskplay.tasks.decoding import generate, generating_families

PROMPTS = [[3, 10, 11, 12, 13, 14], [3, 20, 21], [3, 40, 41, 42, 43, 44, 45, 46, 47]]


def tiny(family: str, **overrides):
    torch.manual_seed(0)
    return build_model(preset("tiny", family=family, **overrides)).eval()


@pytest.fixture
def eager_compile(monkeypatch):
    """torch.compile as the identity: the static cache's step run eagerly, so that these tests check the cache's
    bookkeeping without paying a compilation per model (test_compiled_step_... compiles once)."""
    monkeypatch.setattr(torch, "compile", lambda fn, **_: fn)


def same_as_plain(model, **options):
    plain = generate(model, PROMPTS, max_new_tokens=10, output_logits=True, **options)
    fast = generate(model, PROMPTS, max_new_tokens=10, output_logits=True, compile=True, **options)
    assert [g.token_ids for g in fast] == [g.token_ids for g in plain]
    assert [g.finish_reason for g in fast] == [g.finish_reason for g in plain]
    for f, p in zip(fast, plain, strict=True):
        torch.testing.assert_close(f.logits, p.logits, atol=1e-5, rtol=1e-5)
        assert f.log_prob == pytest.approx(p.log_prob, abs=1e-4)
    return plain


@pytest.mark.parametrize("family", generating_families())
def test_static_cache_gives_the_plain_paths_tokens_and_logits(eager_compile, family):
    same_as_plain(tiny(family), stop_ids=[])


def test_an_int8_copy_decodes_over_the_static_cache(eager_compile):
    from maskplay.runtime.precision import quantize_int8

    same_as_plain(quantize_int8(tiny("gpt")), stop_ids=[])


def test_generate_takes_int8_with_compile_on_the_command_line(eager_compile, capsys):
    from maskplay.cli import main

    assert main(["generate", "gpt-mini-wiki", "the cat", "--precision", "int8", "--compile",
                 "--max-new-tokens", "3"]) == 0
    assert capsys.readouterr().out.strip()


@pytest.mark.parametrize("positions", ["rotary", "alibi"])
def test_static_cache_with_position_terms_inside_attention(eager_compile, positions):
    same_as_plain(tiny("gpt", positions=positions), stop_ids=[])


def test_rows_that_stop_early_leave_holes_as_in_the_plain_path(eager_compile):
    model = tiny("gpt")
    first = generate(model, PROMPTS, max_new_tokens=10, stop_ids=[])
    stop = first[1].token_ids[2]  # the second row stops after two tokens
    plain = same_as_plain(model, stop_ids=[stop])
    assert plain[1].finish_reason == "stop"


def test_sampling_with_a_seed_draws_the_same_tokens(eager_compile):
    model = tiny("gpt")
    options = dict(strategy="sample", seed=7, top_k=20, temperature=0.8, stop_ids=[])
    same_as_plain(model, **options)


def test_the_steps_own_greedy_choice_gives_the_plain_paths_tokens_and_scores(eager_compile):
    """Greedy without the logits kept: the compiled step returns its tokens and their log-probabilities itself."""
    model = tiny("gpt")
    stop = generate(model, PROMPTS, max_new_tokens=10, stop_ids=[])[1].token_ids[2]
    for stops in ([], [stop]):
        plain = generate(model, PROMPTS, max_new_tokens=10, stop_ids=stops)
        fast = generate(model, PROMPTS, max_new_tokens=10, stop_ids=stops, compile=True)
        assert [g.token_ids for g in fast] == [g.token_ids for g in plain]
        assert [g.finish_reason for g in fast] == [g.finish_reason for g in plain]
        assert [g.log_prob for g in fast] == pytest.approx([g.log_prob for g in plain], abs=1e-4)
    assert static_step(model, len(PROMPTS), 9 + 10, torch.device("cpu"), torch.float32, greedy=True).greedy


def test_the_greedy_choice_takes_the_first_of_equal_scores_as_argmax_does():
    logits = torch.tensor([[0.0, 2.0, 1.0, 2.0], [3.0, 3.0, 3.0, 3.0], [-1.0, -5.0, 4.0, 4.0]])

    class Fixed:
        def step(self, tokens, cache, alive):
            return logits

    chosen, log_probs = _run_greedy_step(Fixed(), None, None, None)
    assert chosen.tolist() == logits.argmax(-1).tolist() == [1, 0, 2]
    torch.testing.assert_close(log_probs, logits.log_softmax(-1).gather(1, chosen[:, None])[:, 0])


@pytest.mark.slow
@pytest.mark.heavy
def test_compiled_steps_give_the_plain_paths_tokens_and_are_reused():
    """Compiled for real. Each step skips its guards after its first call (static_decode.StaticStep), so steps of
    other shapes and of changed weights, called in turn, must each still run their own program."""
    model = tiny("gpt")
    same_as_plain(model, stop_ids=[])
    step = static_step(model, len(PROMPTS), 9 + 10, torch.device("cpu"), torch.float32)
    one = generate(model, PROMPTS[:1], max_new_tokens=10, stop_ids=[])
    assert generate(model, PROMPTS[:1], max_new_tokens=10, compile=True, stop_ids=[])[0].token_ids == one[0].token_ids
    same_as_plain(model, stop_ids=[])
    assert static_step(model, len(PROMPTS), 9 + 10, torch.device("cpu"), torch.float32) is step
    assert step.cache.capacity == CAPACITY_STEP and step.calls > 9
    before = [g.token_ids for g in generate(model, PROMPTS, max_new_tokens=10, stop_ids=[])]
    with torch.no_grad():
        model.encoder.layers[0].attn.value.weight.mul_(3.0)  # the frozen constants are stale now
    assert [g.token_ids for g in same_as_plain(model, stop_ids=[])] != before


@pytest.mark.slow
@pytest.mark.heavy
def test_the_compiled_step_freezes_its_weights_and_has_a_cpp_wrapper(monkeypatch):
    """Inductor's freezing pass (weights made prepacked constants) runs when the step compiles: torch 2.13 ignores
    compile(options={"freezing": True}) for this: Dynamo has lifted the weights to inputs before inductor reads it, so
    the pass ran with nothing to freeze, at half the speed. The step's calls are written as C++ (CPP_WRAPPER)."""
    import torch._inductor.freezing as freezing
    from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu

    wrappers = []  # C++ wrappers made
    real_create = CppWrapperCpu.create

    def create_spy(*args, **kwargs):
        wrappers.append(real_create(*args, **kwargs))
        return wrappers[-1]

    monkeypatch.setattr(CppWrapperCpu, "create", staticmethod(create_spy))

    frozen = []  # inputs of each frozen graph that became constants
    real = freezing.freeze

    def spy(dynamo_gm, aot_gm, example_inputs):
        graph, kept = real(dynamo_gm, aot_gm, example_inputs)
        frozen.append(len(example_inputs) - len(kept))
        return graph, kept

    monkeypatch.setattr(freezing, "freeze", spy)
    torch.manual_seed(1)
    model = build_model(preset("tiny", family="gpt", hidden_size=48)).eval()  # a graph no other test compiled
    same_as_plain(model, stop_ids=[])
    weights = sum(1 for _ in model.parameters())
    assert frozen and frozen[0] >= weights - 2  # every weight but those the graph does not read
    assert wrappers  # the compiled step's wrapper is C++


@pytest.mark.slow
@pytest.mark.heavy
def test_a_compiled_int8_step_computes_the_traced_layers_arithmetic(monkeypatch):
    """An int8 copy's compiled step (its int8 products in inductor's own int8 GEMM or oneDNN's kernel) against the
    same model decoded eagerly, its prompt as before and every step with its int8 layers in the form torch.compile
    traces (Int8Linear.traced): the same tokens, logits within the rounding of a reordered fp32 sum."""
    from maskplay.runtime.precision import quantize_int8
    from maskplay.runtime.quant import Int8Linear

    torch.manual_seed(2)
    model = quantize_int8(build_model(preset("tiny", family="gpt", hidden_size=40)).eval())  # a graph of its own
    fast = generate(model, PROMPTS, max_new_tokens=10, output_logits=True, compile=True, stop_ids=[])
    step = model.step

    def traced_step(*args):
        with monkeypatch.context() as patch:
            patch.setattr(Int8Linear, "forward", Int8Linear.traced)
            return step(*args)

    monkeypatch.setattr(model, "step", traced_step)
    plain = generate(model, PROMPTS, max_new_tokens=10, output_logits=True, stop_ids=[])
    assert [g.token_ids for g in fast] == [g.token_ids for g in plain]
    for f, p in zip(fast, plain, strict=True):
        torch.testing.assert_close(f.logits, p.logits, atol=1e-4, rtol=1e-4)


def test_a_prompt_that_fills_the_capacity_and_no_new_tokens(eager_compile):
    model = tiny("gpt")
    prompt = [[3, *range(10, 10 + CAPACITY_STEP - 1)]]  # exactly CAPACITY_STEP tokens
    for steps in (0, 1, 2):
        plain = generate(model, prompt, max_new_tokens=steps, stop_ids=[])
        assert generate(model, prompt, max_new_tokens=steps, stop_ids=[], compile=True)[0].token_ids == plain[0].token_ids


def test_compile_refuses_beam_search_and_the_uncached_path():
    model = tiny("gpt")
    with pytest.raises(ValueError, match="compile"):
        generate(model, PROMPTS, compile=True, strategy="beam")
    with pytest.raises(ValueError, match="compile"):
        generate(model, PROMPTS, compile=True, use_cache=False)


def test_static_cache_refuses_what_it_cannot_hold():
    model = tiny("gpt")
    ids = torch.tensor([[3, 10, 11], [0, 0, 0]])
    with torch.inference_mode():
        cache, _ = model.prefill(ids, ids != 0)
    static = StaticKVCache(model.config.num_layers, 2, 8)
    with pytest.raises(ValueError, match="needs a real cached token"):
        static.load(cache)
    with pytest.raises(ValueError, match="cannot take"):
        StaticKVCache(model.config.num_layers, 3, 8).load(cache)
    with pytest.raises(ValueError, match="one new token per row"):
        static.extend(torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(NotImplementedError):
        static.reorder(torch.tensor([0, 0]))
    assert not KVCache(1).static and static.static


def test_a_weight_change_makes_a_new_step(eager_compile):
    model = tiny("gpt")
    generate(model, PROMPTS, max_new_tokens=4, compile=True, stop_ids=[])
    step = static_step(model, len(PROMPTS), 9 + 4, torch.device("cpu"), torch.float32)
    with torch.no_grad():
        next(model.parameters()).add_(0.5)
    assert static_step(model, len(PROMPTS), 9 + 4, torch.device("cpu"), torch.float32) is not step
    same_as_plain(model, stop_ids=[])  # and the new weights are the ones decoded with
