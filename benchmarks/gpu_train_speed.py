"""Training throughput on one GPU: maskplay's families against what users would pick instead, in one run.

Cases (each a full optimizer step: forward, backward, clipping, the optimizer's update, on batch x seq_len tokens of
packed rows, bf16 autocast, torch.compile where --compile says, fused AdamW; attention through SDPA wherever the
family's mask allows, as the model does on its own):

- gpt2-small: GPT at GPT-2 small's shape (12 x 768, 12 heads, FFN 3,072, 1,024 tokens, vocabulary 50,304, pre-LN,
  no dropout) against HuggingFace GPT2LMHeadModel of the same shape (sdpa attention, torch.compile, bf16 autocast)
  and litgpt's GPT when litgpt is installed;
- babylm: the 12 x 384 models (6 heads, FFN 1,536, 128 tokens, batch 256, vocabulary 16,384) for GPT, BERT, T-TA
  and GPT-BERT, each family against its HuggingFace twin (GPT -> GPT2LMHeadModel, the others -> BertForMaskedLM,
  the same size), and with --recipe each family as `maskplay pretrain` runs configs/babylm/strict-small-*.toml
  (its architecture: disentangled positions, GEGLU, ...; its LAMB; its run.compile, or --recipe-compile's scope:
  step, the whole forward, or layers, block by block), which benchmarks/gpu_babylm.sh
  plans its training budgets from.

Each of maskplay's cases also records what its attention hands SDPA ("attention": sdpa_forms): GPT's causal mask
goes as is_causal and BERT's unpadded batches without a mask (masks.sdpa_kind), so SDPA's flash kernels can run;
T-TA's no-diagonal mask, GPT-BERT's mixed-mode batches and the recipes' disentangled position bias still pass a mask.

Reports tokens/s, the ratio to the family's HuggingFace twin, MFU (model FLOPs of maskplay.runtime.flops per second over the
bf16 dense peak: 989 TFLOP/s for an H100 or H200 SXM, else this device's measured matmul peak) and the peak memory
(torch.cuda.max_memory_allocated; on a CPU the process's resident-set growth), as JSON (--out), written after every
case so that a time limit leaves the cases done. --tiny shrinks every shape for a dry run on a CPU.

    python benchmarks/gpu_train_speed.py --device cuda --out gpu-train-speed.json
    python benchmarks/gpu_train_speed.py --device cpu --tiny --steps 2 --out runs/tiny.json
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PeakRSS, machine, matmul_peak  # noqa: E402

from maskplay import preset  # noqa: E402
from maskplay.config import apply_overrides  # noqa: E402
from maskplay.families import build_model  # noqa: E402
from maskplay.families.bert import mask_tokens  # noqa: E402
from maskplay.nn.attention import flex  # noqa: E402
from maskplay.runtime.flops import family_training_flops_per_token, training_flops_per_token  # noqa: E402
from maskplay.runtime.precision import forward_in  # noqa: E402
from maskplay.tasks.train.stepping import compile_forward  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# bf16 dense tensor-core peaks (no sparsity), FLOP/s, by a name fragment of torch.cuda.get_device_name
PEAKS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}
FAMILIES = ("gpt", "bert", "tta", "gpt-bert")
TWIN = {"gpt": "HF gpt2"}  # every other family is timed against HF bert


@dataclass
class Shape:
    name: str
    hidden: int
    layers: int
    heads: int
    ffn: int
    seq_len: int
    batch: int
    vocab: int


def shapes(tiny: bool) -> dict[str, Shape]:
    if tiny:
        return {"gpt2-small": Shape("gpt2-small", 64, 2, 4, 256, 64, 2, 512),
                "babylm": Shape("babylm", 32, 2, 2, 128, 32, 4, 256)}
    return {"gpt2-small": Shape("gpt2-small", 768, 12, 12, 3072, 1024, 16, 50304),
            "babylm": Shape("babylm", 384, 12, 6, 1536, 128, 256, 16384)}


def model_config(shape: Shape, family: str, recipe: bool = False):
    sizes = dict(hidden_size=shape.hidden, num_layers=shape.layers, num_heads=shape.heads,
                 intermediate_size=shape.ffn, max_position=max(shape.seq_len, 128), vocab_size=shape.vocab,
                 hidden_dropout=0.0, attention_dropout=0.0)
    if recipe:  # the strict-small recipe's architecture switches at this shape
        from maskplay.tasks.train import load_train_config

        sizes["intermediate_size"] = shape.ffn * 5 // 4  # a gated FFN is 2/3 as wide: gpt-bert-small's 1,920

        section = load_train_config(REPO / "configs" / "babylm" / f"strict-small-{family}.toml").model
        switches = {k: v for k, v in section.overrides().items() if k not in sizes and "dropout" not in k}
        return preset("mini", family=family, **section.family_sections(), **switches, **sizes)
    extra = dict(norm_placement="pre", gelu_tanh=True) if shape.name == "gpt2-small" else {}
    return preset("mini", family=family, **sizes, **extra)


def train_step(model: torch.nn.Module, params: list, loss_of: Callable[[torch.Tensor], torch.Tensor],
               batches: list[torch.Tensor], fused: bool, opt: torch.optim.Optimizer | None = None) -> Callable[[], None]:
    """One optimizer step per call on the batches in turn: AdamW (fused where the device has it) unless `opt`
    is given, clip 1.0."""
    opt = opt or torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, eps=1e-6, fused=fused)
    state = {"i": 0}

    def step() -> None:
        loss = loss_of(batches[state["i"] % len(batches)])
        state["i"] += 1
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


class Cases:
    """Builds each case's step function on demand (one model in memory at a time)."""

    def __init__(self, args: argparse.Namespace, device: torch.device) -> None:
        self.args, self.device = args, device
        self.compile = args.compile == "on" or (args.compile == "auto" and device.type == "cuda")
        self.fused = device.type in ("cuda", "cpu")

    def batches(self, shape: Shape) -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(0)
        return [torch.randint(7, shape.vocab, (shape.batch, shape.seq_len), generator=g) for _ in range(2)]

    def maybe_compile(self, fn: Callable) -> Callable:
        return torch.compile(fn) if self.compile else fn

    def ours(self, shape: Shape, family: str, recipe: bool = False, model_sets: Sequence[str] = (),
             optim_sets: Sequence[str] = ()) -> tuple[Callable[[], None], float]:
        """With `recipe`, what `maskplay pretrain` runs for the family's strict-small config: its architecture,
        its optimizer (LAMB) and its run.compile and run.compile_scope (or --recipe-compile), minus the data
        loading. `model_sets` and `optim_sets` override the model config and the recipe's optim section
        (switch_cost.py's variants; optimizer=adamw is fused AdamW with the recipe's settings)."""
        torch.manual_seed(0)
        config = apply_overrides(model_config(shape, family, recipe), list(model_sets))
        model = build_model(config).to(self.device).train()
        mask = torch.ones(shape.batch, shape.seq_len, dtype=torch.bool)
        gen = torch.Generator().manual_seed(0)
        forward = functools.partial(forward_in, model, "bf16-autocast")
        opt = None
        if recipe:
            from maskplay.tasks.train import load_train_config
            from maskplay.tasks.train.schedule import build_optimizer

            train_config = load_train_config(REPO / "configs" / "babylm" / f"strict-small-{family}.toml")
            optim = apply_overrides(train_config.optim, list(optim_sets))
            if optim.optimizer == "adamw":  # fused, as the plain cases'
                opt = torch.optim.AdamW(model.parameters(), lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps,
                                        weight_decay=optim.weight_decay, fused=self.fused)
            else:
                opt = build_optimizer(model, optim)
            scope = recipe_scope(self.args.recipe_compile, train_config.run)
            # compile_time.py --backend aot_eager: dynamo's and AOTAutograd's share of a compile, without inductor's
            backend = getattr(self.args, "backend", "inductor")
            forward = compile_forward(forward, model, scope, backend) if scope else forward
        elif self.compile:  # as run.compile compiles it
            forward = compile_forward(forward, model, "step")

        def loss_of(ids: torch.Tensor) -> torch.Tensor:
            # the family's inputs are made on the CPU and moved, as the trainer does (train/stepping.py)
            batch = model.training_batch(ids, mask, generator=gen)
            with model.known_from_host(batch):  # packed rows, one mode or both: as the trainer tells the forward
                return forward(**{k: v.to(self.device, non_blocking=True) for k, v in batch.items()}).loss

        flops = shape.batch * shape.seq_len * family_training_flops_per_token(model.config, shape.seq_len)
        probe = model.training_batch(self.batches(shape)[0], mask, generator=torch.Generator().manual_seed(0))
        forms = sdpa_forms(lambda: model(**{k: v.to(self.device) for k, v in probe.items()}))
        step = train_step(model, list(model.parameters()), loss_of, self.batches(shape), self.fused, opt)
        return step, flops, {"attention": forms, "parameters": sum(q.numel() for q in model.parameters())}

    def hf_gpt2(self, shape: Shape) -> tuple[Callable[[], None], float]:
        import transformers

        cfg = transformers.GPT2Config(vocab_size=shape.vocab, n_positions=max(shape.seq_len, 128), n_embd=shape.hidden,
                                      n_layer=shape.layers, n_head=shape.heads, n_inner=shape.ffn, resid_pdrop=0.0,
                                      embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=3, eos_token_id=1,
                                      attn_implementation="sdpa")
        torch.manual_seed(0)
        model = transformers.GPT2LMHeadModel(cfg).to(self.device).train()
        # named, so that its loss does not log "loss_type=None ... unrecognized", which breaks the compiled graph
        model.loss_type = "ForCausalLM"
        forward = self.maybe_compile(model)

        def loss_of(ids: torch.Tensor) -> torch.Tensor:
            ids = ids.to(self.device, non_blocking=True)
            with torch.autocast(self.device.type, dtype=torch.bfloat16):
                return forward(input_ids=ids, labels=ids).loss

        flops = shape.batch * shape.seq_len * training_flops_per_token(
            model_config(shape, "gpt"), shape.seq_len, 1.0)
        return train_step(model, list(model.parameters()), loss_of, self.batches(shape), self.fused), flops

    def hf_bert(self, shape: Shape) -> tuple[Callable[[], None], float]:
        import transformers

        ours = model_config(shape, "bert")
        cfg = transformers.BertConfig(vocab_size=shape.vocab, hidden_size=shape.hidden, num_hidden_layers=shape.layers,
                                      num_attention_heads=shape.heads, intermediate_size=shape.ffn,
                                      max_position_embeddings=max(shape.seq_len, 128), hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0, attn_implementation="sdpa")
        torch.manual_seed(0)
        model = transformers.BertForMaskedLM(cfg).to(self.device).train()
        forward = self.maybe_compile(model)
        mask = torch.ones(shape.batch, shape.seq_len, dtype=torch.bool)
        gen = torch.Generator().manual_seed(0)

        def loss_of(ids: torch.Tensor) -> torch.Tensor:
            corrupted, labels = mask_tokens(ids, mask, ours.special_token_ids, ours.mask_token_id, shape.vocab,
                                            generator=gen)
            with torch.autocast(self.device.type, dtype=torch.bfloat16):
                return forward(input_ids=corrupted.to(self.device, non_blocking=True),
                               labels=labels.to(self.device, non_blocking=True)).loss

        # HuggingFace applies its head at every position: count what it computes
        flops = shape.batch * shape.seq_len * training_flops_per_token(ours, shape.seq_len, 1.0)
        return train_step(model, list(model.parameters()), loss_of, self.batches(shape), self.fused), flops

    def litgpt(self, shape: Shape) -> tuple[Callable[[], None], float]:
        from litgpt import GPT, Config  # not a dependency: the case is skipped where it is not installed

        cfg = Config(block_size=shape.seq_len, vocab_size=shape.vocab, padded_vocab_size=shape.vocab,
                     n_layer=shape.layers, n_head=shape.heads, n_embd=shape.hidden, bias=True,
                     norm_class_name="LayerNorm", mlp_class_name="GptNeoxMLP", intermediate_size=shape.ffn,
                     parallel_residual=False, rotary_percentage=1.0)
        torch.manual_seed(0)
        model = GPT(cfg).to(self.device).train()
        forward = self.maybe_compile(model)

        def loss_of(ids: torch.Tensor) -> torch.Tensor:
            ids = ids.to(self.device, non_blocking=True)
            with torch.autocast(self.device.type, dtype=torch.bfloat16):
                logits = forward(ids)
            return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())

        flops = shape.batch * shape.seq_len * training_flops_per_token(
            model_config(shape, "gpt"), shape.seq_len, 1.0)
        return train_step(model, list(model.parameters()), loss_of, self.batches(shape), self.fused), flops

    def plan(self) -> list[tuple[str, Shape, Callable[[], tuple[Callable[[], None], float]]]]:
        """(case name, shape, builder) in the order they run: the recipes first (quick: no compiling; a training
        plan reads them), then GPT-2 small's shape, then the 12 x 384 comparisons, so that a time limit cuts
        the least needed."""
        s = shapes(self.args.tiny)
        if self.args.gpt2_batch:  # GPT-2 small's MFU against its batch (16 by default: 16 k tokens a step)
            s["gpt2-small"].batch = self.args.gpt2_batch
        chosen = set(self.args.shapes)
        out: list = []
        b = s["babylm"]
        if "babylm" in chosen and self.args.recipe:
            out += [(f"babylm {f} recipe", b, lambda f=f: self.ours(b, f, recipe=True)) for f in self.args.families]
        if "gpt2-small" in chosen and not self.args.recipe_only:
            g = s["gpt2-small"]
            out += [("gpt2-small gpt", g, lambda: self.ours(g, "gpt")),
                    ("gpt2-small HF gpt2", g, lambda: self.hf_gpt2(g)),
                    ("gpt2-small litgpt", g, lambda: self.litgpt(g))]
        if "babylm" in chosen and not self.args.recipe_only:
            out += [("babylm HF gpt2", b, lambda: self.hf_gpt2(b)), ("babylm HF bert", b, lambda: self.hf_bert(b))]
            out += [(f"babylm {f}", b, lambda f=f: self.ours(b, f)) for f in self.args.families]
        return out


def recipe_scope(choice: str, run) -> str | None:  # noqa: ANN001 - run: train config's RunSection
    """--recipe-compile as a run.compile_scope, None for no compiling: "config" reads the recipe's run section, "on" is
    "step" (the whole forward)."""
    if choice == "config":
        return run.compile_scope if run.compile else None
    return {"off": None, "on": "step"}.get(choice, choice)


def sdpa_forms(forward: Callable[[], object]) -> list[str]:
    """What the model's attention hands SDPA in one forward pass (uncompiled, no gradient): "is_causal" and "no mask"
    let the flash kernels run; "bool mask" (T-TA's no-diagonal, GPT-BERT's per-row modes, padding) and "float mask"
    (a position bias: disentangled, ALiBi, T5) take the memory-efficient or the math kernel; none at all:
    "written out" (attention dropout, talking heads)."""
    seen: set[str] = set()
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        mask = kwargs.get("attn_mask")
        seen.add("is_causal" if kwargs.get("is_causal") else "no mask" if mask is None
                 else "bool mask" if mask.dtype == torch.bool else "float mask")
        return real(*args, **kwargs)

    F.scaled_dot_product_attention = spy
    try:
        with torch.no_grad():
            forward()
    finally:
        F.scaled_dot_product_attention = real
    return sorted(seen) or ["written out"]


def time_case(step: Callable[[], None], device: torch.device, warmup: int, steps: int) -> tuple[float, float, float]:
    """(seconds per step, seconds of warm-up (compiling included), peak memory in MB)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rss = PeakRSS().__enter__() if device.type == "cpu" else None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for _ in range(warmup):
        step()
    sync()
    warm = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    seconds = (time.perf_counter() - start) / steps
    if rss is not None:
        rss.__exit__()
        memory = (rss.peak - rss.start) / 2**20
    else:
        memory = torch.cuda.max_memory_allocated(device) / 2**20
    return seconds, warm, memory


def peak_flops(device: torch.device) -> tuple[float, str]:
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, value in PEAKS.items():
            if key in name:
                return value, f"{name}: bf16 dense peak {value / 1e12:.0f} TFLOP/s"
        return matmul_peak_cuda(device), f"{name}: measured bf16 matmul peak"
    return matmul_peak(torch.bfloat16), "CPU: measured bf16 matmul peak (2048^3)"


def matmul_peak_cuda(device: torch.device, size: int = 8192) -> float:
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    torch.mm(a, a)
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(10):
        torch.mm(a, a)
    torch.cuda.synchronize(device)
    return 10 * 2 * size**3 / (time.perf_counter() - start)


def run_case(name: str, shape: Shape, build: Callable, args: argparse.Namespace, device: torch.device,
             peak: float) -> dict:
    row: dict = {"case": name, "shape": vars(shape)}
    try:
        step, flops, *extra = build()  # ours add what their attention hands SDPA (sdpa_forms)
        row.update(*extra)
        seconds, warm, memory = time_case(step, device, args.warmup, args.steps)
    except ImportError as err:
        return {**row, "skipped": f"{err.name or err} is not installed"}
    except Exception as err:  # noqa: BLE001 - a case that fails is reported; the others still run
        return {**row, "error": f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:500]}
    finally:
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    tokens = shape.batch * shape.seq_len
    return {**row, "tokens_per_s": tokens / seconds, "step_ms": 1000 * seconds, "warmup_s": warm,
            "mfu": flops / seconds / peak, "model_flops_per_step": flops, "peak_memory_mb": memory}


def add_ratios(rows: list[dict]) -> None:
    """Each of our cases' tokens/s over its family's HuggingFace twin's in the same shape."""
    speed = {r["case"]: r.get("tokens_per_s") for r in rows}
    for r in rows:
        shape, _, rest = r["case"].partition(" ")
        family = rest.split(" ")[0]
        if family in FAMILIES and r.get("tokens_per_s"):
            twin = f"{shape} {TWIN.get(family, 'HF bert')}"
            if speed.get(twin):
                r["vs"] = twin
                r["ratio_vs_hf"] = r["tokens_per_s"] / speed[twin]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--shapes", nargs="+", default=["gpt2-small", "babylm"], choices=["gpt2-small", "babylm"])
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    p.add_argument("--recipe", action="store_true", help="also time each family at its strict-small architecture")
    p.add_argument("--recipe-only", action="store_true", help="time the --recipe cases alone")
    p.add_argument("--recipe-compile", default="config",
                   choices=["config", "on", "off", "step", "layers", "nested"],
                   help="the recipe cases under torch.compile: as their config's run.compile and run.compile_scope "
                        "say, or off, or compiled whole (step, or on), or block by block (layers), or whole with "
                        "each block a region compiled once (nested): run.compile_scope")
    p.add_argument("--compile", default="auto", choices=["auto", "on", "off"], help="auto: on for cuda")
    p.add_argument("--warmup", type=int, default=3, help="steps before timing (compiling happens here)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per case")
    p.add_argument("--tiny", action="store_true", help="tiny shapes, for a dry run on a CPU")
    p.add_argument("--gpt2-batch", type=int, default=0, help="sequences a step at GPT-2 small's shape (default 16)")
    p.add_argument("--flex", action="store_true",
                   help="maskplay's cases with run.flex_attention: attention under a materialised mask (T-TA's, "
                        "GPT-BERT's mixed batches, the recipes' disentangled terms) through FlexAttention; CUDA only")
    p.add_argument("--out", default=None, help="write the results as JSON here (after every case)")
    args = p.parse_args()
    device = torch.device(args.device)
    flex.enabled = args.flex  # read by maskplay's attention only: the HuggingFace and litgpt cases are unchanged
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    peak, peak_note = peak_flops(device)
    cases = Cases(args, device)
    result = {"machine": machine(), "device": str(device), "peak_flops": peak, "peak": peak_note,
              "compile": cases.compile, "precision": "bf16-autocast", "args": vars(args), "rows": []}
    print(f"{result['machine']}\n{peak_note}; torch.compile {'on' if cases.compile else 'off'}", flush=True)
    print(f"{'case':<28}{'tokens/s':>12}{'vs HF':>8}{'MFU':>8}{'memory MB':>11}{'warm-up s':>11}", flush=True)
    for name, shape, build in cases.plan():
        row = run_case(name, shape, build, args, device, peak)
        result["rows"].append(row)
        add_ratios(result["rows"])
        if "tokens_per_s" in row:
            ratio = f"{row['ratio_vs_hf']:.2f}x" if "ratio_vs_hf" in row else "-"
            print(f"{name:<28}{row['tokens_per_s']:>12,.0f}{ratio:>8}{row['mfu']:>8.1%}"
                  f"{row['peak_memory_mb']:>11,.0f}{row['warmup_s']:>11.1f}", flush=True)
        else:
            print(f"{name:<28}  {row.get('skipped') or row.get('error')}", flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    for row in result["rows"]:
        if "ratio_vs_hf" in row:
            print(f"{row['case']}: {row['ratio_vs_hf']:.2f}x the tokens/s of {row['vs']}")


if __name__ == "__main__":
    main()
