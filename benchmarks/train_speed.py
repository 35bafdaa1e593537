"""Training throughput of maskplay's families against HuggingFace BertForMaskedLM of the same size, on the
same batches, in one run, with the ratios and each run's model FLOP utilisation against this machine's
measured matmul peak.

    python benchmarks/train_speed.py --preset mini --data runs/data-wiki16k
    python benchmarks/train_speed.py --preset tta-paper --families tta --hf-precisions fp32 --memory
    python benchmarks/train_speed.py --preset mini --families bert electra --precisions bf16 --hf-electra

With --hf-electra the baseline is HuggingFace ELECTRA instead: ElectraForMaskedLM (generator, 1/4 size) +
ElectraForPreTraining sharing their embeddings, driven by a plain loop (mask 15 %, sample the generator's
softmax at the masked positions, loss = MLM + 50 x BCE), the way its users pretrain it.

With --hf-xlnet the baseline is HuggingFace XLNetLMHeadModel of the same size, given what XLNet pretraining gives it:
a random factorization order per sequence as perm_mask, the last sixth of each order (partial prediction, K = 6)
as target_mapping and labels, loss from the model.

    python benchmarks/train_speed.py --preset mini --families xlnet --precisions fp32 bf16 --hf-xlnet

With --hf-gpt2 the baseline is HuggingFace GPT2LMHeadModel of the same size (GPT's twin: next-token loss from
labels = the input ids, the shift inside the model).

    python benchmarks/train_speed.py --preset mini --families gpt --hf-gpt2

With --switch NAME:FIELD=VALUE[,FIELD=VALUE...] (repeatable) each family/precision also runs with those ModelConfig
fields set (docs/guides/switches.md), and each switch's step time is reported as a ratio to the default's of the same
run:

    python benchmarks/train_speed.py --families bert --precisions bf16 --switch rotary:positions=rotary \
        --switch swiglu:ffn=swiglu --switch pre-rms:norm_placement=pre,norm=rmsnorm

Every case does full optimizer steps (forward, backward, clipping, AdamW) on batch x seq_len real tokens.
Cases are interleaved round by round, so load from other processes hits them alike; the median is reported.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PeakRSS, interleaved, machine, matmul_peak  # noqa: E402

from maskplay import preset  # noqa: E402
from maskplay.families import build_model
from maskplay.families.bert import mask_tokens  # noqa: E402
from maskplay.families.electra import generator_sizes  # noqa: E402
from maskplay.families.unilm import UnilmConfig  # noqa: E402
from maskplay.families.xlnet import training_flops as xlnet_training_flops  # noqa: E402
from maskplay.nn.masks import partial_targets, to_perm_mask  # noqa: E402
from maskplay.runtime.flops import family_training_flops_per_token, training_flops_per_token  # noqa: E402
from maskplay.runtime.precision import forward_in  # noqa: E402


def windows(data: str | None, count: int, seq_len: int, vocab: int) -> list[torch.Tensor]:
    """`count` windows of seq_len consecutive tokens from a prepared split, or random ids without one."""
    if data and Path(data, "train").is_dir():
        from maskplay.data.dataset import TokenDataset

        tokens = TokenDataset(Path(data, "train")).tokens
        return [torch.as_tensor(tokens[i * seq_len:(i + 1) * seq_len].astype("int64")) for i in range(count)]
    print(f"(no prepared data at {data!r}: random token ids)")
    g = torch.Generator().manual_seed(0)
    return [torch.randint(7, vocab, (seq_len,), generator=g) for _ in range(count)]


def make_cases(args: argparse.Namespace) -> tuple[dict[str, Callable[[], object]], dict[str, float]]:
    vocab = args.vocab_size or preset(args.preset).vocab_size
    stream = windows(args.data, args.batch_size * 4, args.seq_len, vocab)
    batches = [torch.stack(stream[i:i + args.batch_size]) for i in range(0, len(stream), args.batch_size)]
    mask = torch.ones(args.batch_size, args.seq_len, dtype=torch.bool)
    cases: dict[str, Callable[[], object]] = {}
    flops: dict[str, float] = {}
    tokens = args.batch_size * args.seq_len

    def optimizer_step(model: torch.nn.Module, loss_of: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], None]:
        """One full training step per call (AdamW as the trainer sets it up), on the batches in turn."""
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6)
        state = {"i": 0}

        def step() -> None:
            loss = loss_of(batches[state["i"] % len(batches)])
            state["i"] += 1
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)

        return step

    def our_case(family: str, precision: str, **switch: object) -> Callable[[], object]:
        torch.manual_seed(0)
        # UniLM pretrains with its mixed objective (text windows have no source/target split for seq2seq)
        objective = {"unilm": UnilmConfig("mixed")} if family == "unilm" else {}
        model = build_model(preset(args.preset, family=family, vocab_size=vocab, **objective, **switch)).train()
        name = " ".join([family, precision, *([switch_names[tuple(switch.items())]] if switch else [])])
        gen = torch.Generator().manual_seed(0)
        step = optimizer_step(
            model, lambda ids: forward_in(model, precision, **model.training_batch(ids, mask, generator=gen)).loss)
        # (the FLOP counts are the default architecture's: a switch's MFU is relative to the work of the default)
        flops[name] = tokens * family_training_flops_per_token(model.config, args.seq_len)
        return step

    def hf_case(precision: str) -> Callable[[], object]:
        import transformers

        cfg = preset(args.preset, family="bert", vocab_size=vocab)
        hf_cfg = transformers.BertConfig(
            vocab_size=vocab, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
            num_attention_heads=cfg.num_heads, intermediate_size=cfg.intermediate_size,
            max_position_embeddings=cfg.max_position)
        torch.manual_seed(0)
        model = transformers.BertForMaskedLM(hf_cfg).train()
        gen = torch.Generator().manual_seed(0)

        def loss_of(ids: torch.Tensor) -> torch.Tensor:
            corrupted, labels = mask_tokens(ids, mask, cfg.special_token_ids, cfg.mask_token_id, vocab,
                                            generator=gen)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-autocast"):
                return model(input_ids=corrupted, attention_mask=mask.long(), labels=labels).loss

        step = optimizer_step(model, loss_of)

        # HuggingFace applies its head at every position, so count what it computes
        flops[f"HF {precision}"] = tokens * training_flops_per_token(cfg, args.seq_len, 1.0)
        return step

    def hf_gpt2_case(precision: str) -> Callable[[], object]:
        import transformers

        cfg = preset(args.preset, family="gpt", vocab_size=vocab)
        hf_cfg = transformers.GPT2Config(
            vocab_size=vocab, n_positions=cfg.max_position, n_embd=cfg.hidden_size, n_layer=cfg.num_layers,
            n_head=cfg.num_heads, n_inner=cfg.intermediate_size, bos_token_id=cfg.sos_token_id,
            eos_token_id=cfg.eos_token_id)
        torch.manual_seed(0)
        model = transformers.GPT2LMHeadModel(hf_cfg).train()

        def loss_of(ids: torch.Tensor) -> torch.Tensor:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-autocast"):
                return model(input_ids=ids, attention_mask=mask.long(), labels=ids).loss

        step = optimizer_step(model, loss_of)
        flops[f"HF gpt2 {precision}"] = tokens * training_flops_per_token(cfg, args.seq_len, 1.0)
        return step

    def hf_electra_case(precision: str) -> Callable[[], object]:
        import transformers

        cfg = preset(args.preset, family="electra", vocab_size=vocab)
        gen_sizes = generator_sizes(cfg)

        def hf_config(hidden: int, heads: int, ffn: int) -> transformers.ElectraConfig:
            return transformers.ElectraConfig(
                vocab_size=vocab, embedding_size=cfg.embedding_width, hidden_size=hidden, num_hidden_layers=cfg.num_layers,
                num_attention_heads=heads, intermediate_size=ffn, max_position_embeddings=cfg.max_position)

        torch.manual_seed(0)
        disc = transformers.ElectraForPreTraining(hf_config(cfg.hidden_size, cfg.num_heads, cfg.intermediate_size))
        gen = transformers.ElectraForMaskedLM(hf_config(gen_sizes["hidden_size"], gen_sizes["num_heads"],
                                                        gen_sizes["intermediate_size"]))
        gen.electra.embeddings = disc.electra.embeddings  # shared, as in the paper
        gen.generator_lm_head.weight = disc.electra.embeddings.word_embeddings.weight
        pair = torch.nn.ModuleList([disc, gen]).train()
        gen_rng = torch.Generator().manual_seed(0)

        def loss_of(ids: torch.Tensor) -> torch.Tensor:
            masked, labels = mask_tokens(ids, mask, cfg.special_token_ids, cfg.mask_token_id, vocab, 0.15, gen_rng,
                                         mask_share=0.85, random_share=0.0)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-autocast"):
                g = gen(input_ids=masked, attention_mask=mask.long(), labels=labels)
                selected = labels != -100
                with torch.no_grad():
                    probs = g.logits[selected].float().softmax(-1)
                    sampled = torch.multinomial(probs, 1, generator=gen_rng)[:, 0]
                corrupted = ids.masked_scatter(selected, sampled)
                d = disc(input_ids=corrupted, attention_mask=mask.long(), labels=(corrupted != ids).long())
                return g.loss + 50.0 * d.loss

        step = optimizer_step(pair, loss_of)
        # as computed: the generator's vocabulary head at every position
        gen_cfg = preset(args.preset, family="bert", vocab_size=vocab, **gen_sizes, embedding_size=cfg.embedding_width)
        flops[f"HF electra {precision}"] = tokens * (training_flops_per_token(gen_cfg, args.seq_len, 1.0) +
                                                     training_flops_per_token(cfg, args.seq_len, 0.0))
        return step

    def hf_xlnet_case(precision: str) -> Callable[[], object]:
        import transformers

        from maskplay.families.hf.xlnet import hf_xlnet_config_dict

        cfg = preset(args.preset, family="xlnet", vocab_size=vocab)
        torch.manual_seed(0)
        model = transformers.XLNetLMHeadModel(transformers.XLNetConfig(**hf_xlnet_config_dict(cfg))).train()
        gen = torch.Generator().manual_seed(0)

        def loss_of(ids: torch.Tensor) -> torch.Tensor:
            rank = torch.rand(ids.shape, generator=gen).argsort(dim=1).argsort(dim=1)
            positions, _ = partial_targets(rank, mask, cfg.xlnet.partial_prediction)
            may = rank[:, None, :] < rank[:, :, None]  # i sees j when j comes earlier in the order
            mapping = torch.nn.functional.one_hot(positions, ids.shape[1]).float()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-autocast"):
                return model(input_ids=ids, perm_mask=to_perm_mask(may), target_mapping=mapping,
                             labels=ids.gather(1, positions)).loss

        step = optimizer_step(model, loss_of)
        # as computed: both streams over every position in every layer, the head at the targets
        flops[f"HF xlnet {precision}"] = tokens * xlnet_training_flops(cfg, args.seq_len, full=True)
        return step

    for precision in args.hf_precisions:
        if args.hf_xlnet:
            cases[f"HF xlnet {precision}"] = hf_xlnet_case(precision)
        elif args.hf_gpt2:
            cases[f"HF gpt2 {precision}"] = hf_gpt2_case(precision)
        elif args.hf_electra:
            cases[f"HF electra {precision}"] = hf_electra_case(precision)
        else:
            cases[f"HF {precision}"] = hf_case(precision)
    switches = [parse_switch(text) for text in args.switch]
    switch_names = {tuple(fields.items()): name for name, fields in switches}
    for family in args.families:
        for precision in args.precisions:
            cases[f"{family} {precision}"] = our_case(family, precision)
            for name, fields in switches:
                cases[f"{family} {precision} {name}"] = our_case(family, precision, **fields)
    if args.only:
        cases = {args.only: cases[args.only]}
    return cases, flops


def parse_switch(text: str) -> tuple[str, dict[str, object]]:
    """NAME:FIELD=VALUE[,FIELD=VALUE...] -> (NAME, ModelConfig fields), values typed as --set types them."""
    from maskplay.config import ModelConfig, apply_overrides

    name, _, fields = text.partition(":")
    if not name or not fields or " " in name:
        raise SystemExit(f"--switch {text!r}: expected NAME:FIELD=VALUE[,FIELD=VALUE...], e.g. rotary:positions=rotary")
    config = apply_overrides(ModelConfig(), fields.split(","))
    return name, {f.split("=", 1)[0]: getattr(config, f.split("=", 1)[0]) for f in fields.split(",")}


def memory_of(case: str, argv: list[str]) -> float:
    """Peak resident memory growth during two steps of one case, in a fresh process (MB)."""
    out = subprocess.run([sys.executable, __file__, *argv, "--only", case, "--memory-child"],
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="mini")
    p.add_argument("--vocab-size", type=int, default=None, help="default: the preset's")
    p.add_argument("--data", default="runs/data-wiki16k", help="a `maskplay prepare` output directory")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--families", nargs="+", default=["tta", "bert", "gpt"])
    p.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16", "bf16-autocast"])
    p.add_argument("--hf-precisions", nargs="+", default=["fp32", "bf16-autocast"], choices=["fp32", "bf16-autocast"])
    p.add_argument("--hf-electra", action="store_true",
                   help="baseline: HuggingFace ELECTRA (generator + discriminator) instead of BertForMaskedLM")
    p.add_argument("--hf-xlnet", action="store_true",
                   help="baseline: HuggingFace XLNetLMHeadModel (perm_mask + target_mapping) instead of BertForMaskedLM")
    p.add_argument("--hf-gpt2", action="store_true",
                   help="baseline: HuggingFace GPT2LMHeadModel of the same size (GPT's twin) instead of BertForMaskedLM")
    p.add_argument("--switch", action="append", default=[], metavar="NAME:FIELD=VALUE[,...]",
                   help="also run every family/precision with these ModelConfig fields (docs/guides/switches.md)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--memory", action="store_true", help="also measure each case's peak memory (subprocesses)")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    p.add_argument("--only", default=None, help=argparse.SUPPRESS)
    p.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    if args.memory_child:
        with PeakRSS() as rss:
            cases, _ = make_cases(args)
            step = cases[args.only]
            step()
            step()
        print((rss.peak - rss.start) / 2**20)
        return

    print(machine())
    peak_bf16, peak_fp32 = matmul_peak(torch.bfloat16), matmul_peak(torch.float32)
    print(f"matmul peak (2048^3): bf16 {peak_bf16 / 1e9:.0f} GFLOP/s, fp32 {peak_fp32 / 1e9:.0f} GFLOP/s")
    cases, flops = make_cases(args)
    seconds = interleaved(cases, args.rounds)
    tokens = args.batch_size * args.seq_len
    hf_best = max((tokens / s for name, s in seconds.items() if name.startswith("HF")), default=None)
    argv = [a for a in sys.argv[1:] if a != "--memory"]
    rows = []
    print(f"\npreset {args.preset}, batch {args.batch_size} x {args.seq_len}, median of {args.rounds} rounds")
    if "bert bf16" in seconds and "electra bf16" in seconds:
        print(f"ELECTRA step time / BERT step time (bf16, same discriminator size): "
              f"{seconds['electra bf16'] / seconds['bert bf16']:.2f}x")
    print(f"{'case':<22}{'tokens/s':>10}{'vs HF best':>12}{'MFU (bf16 peak)':>17}{'memory MB':>11}")
    for name, s in seconds.items():
        tps = tokens / s
        mfu = flops[name] / s / peak_bf16
        mem = memory_of(name, argv) if args.memory else None
        ratio = tps / hf_best if hf_best else None
        rows.append({"case": name, "tokens_per_s": tps, "ratio_vs_hf_best": ratio, "mfu_bf16": mfu,
                     "memory_mb": mem})
        print(f"{name:<22}{tps:>10.0f}{(f'{ratio:.2f}x' if ratio else '-'):>12}{mfu:>16.1%}"
              f"{(f'{mem:.0f}' if mem is not None else '-'):>11}")
    for name, s in seconds.items():
        base = " ".join(name.split(" ")[:2])
        if name != base and base in seconds and not name.startswith("HF"):
            print(f"switch cost: {name}: step time {s / seconds[base]:.2f}x the default's ({base})")
    if args.out:
        Path(args.out).write_text(json.dumps({"machine": machine(), "peak_bf16": peak_bf16, "peak_fp32": peak_fp32,
                                              "args": {k: Path(v).name if isinstance(v, str) and Path(v).is_absolute()
                                                       else v for k, v in vars(args).items()},  # no machine paths
                                              "rows": rows}, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
