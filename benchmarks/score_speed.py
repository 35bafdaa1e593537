"""Sentences per second for sentence scoring and embedding at the T-TA paper's size (3 layers, hidden 512,
8 heads, FFN 2048, vocabulary 29,530; random weights), on real sentences from WikiText-103 valid:

- T-TA one pass (maskplay Scorer, method one-pass), at --dtype and at int8,
- BERT PLL bucketed (maskplay Scorer, method pll: copies of many sentences per batch, head at the masked
  position only),
- BERT PLL the naive way with HuggingFace BertForMaskedLM (one masked copy per token, all copies of one
  sentence in one batch, the head over the whole sequence), at --dtype and with torch.ao dynamic int8
  quantisation (its vocabulary projection is an nn.Linear, so it is quantised too),
- XLNet's exact sentence log-likelihood in one pass: maskplay Scorer (method causal: the query stream under the
  left-to-right order, the head at the scored pieces) vs HuggingFace XLNetLMHeadModel given the same weights, a
  left-to-right perm_mask and a target_mapping over every position (one pass per batch, as its users score);
- GPT's exact sentence log-likelihood (causal, one pass): maskplay Scorer vs HuggingFace BertLMHeadModel given the
  same weights (maskplay's GPT is a BERT decoder: the converter's twin), one pass per batch of length-sorted
  sentences, log-softmax over every position as its users score;
- ELECTRA's discriminator score (sum of log P(original) over the pieces, one pass): maskplay Scorer vs HuggingFace
  ElectraForPreTraining given the same weights (the converter's twin), one pass per batch of length-sorted sentences;
- embeddings of GPT, ELECTRA and XLNet against their HuggingFace encoders on the same weights (BertLMHeadModel's
  causal BERT, ElectraModel, XLNetModel; mean pooling), and UniLM's against HF BertModel (no twin of its own);
- embeddings: maskplay encode (T-TA and BERT, mean pooling) at --dtype and at int8 vs HuggingFace BertModel
  mean pooling at --dtype and with torch.ao dynamic int8 quantisation (the int8 route HuggingFace documents);
  the int8 rows' cosine similarity to the fp32 embeddings of the same model is reported.

Two speed-up columns: against the HuggingFace row of the task at --dtype (HuggingFace as it runs), and against
the fastest HuggingFace row of the task, torch.ao int8 included. --keep-freed-memory runs the whole process
with maskplay.runtime.allocator.keep_freed_memory (what `maskplay score/embed/eval` do); it speeds up both sides,
HuggingFace's naive PLL (whose fresh (copies, length, vocabulary) logits are large) the most.

The HuggingFace model gets the maskplay BERT's weights, so the two PLLs must agree; the run checks it. The
cases run interleaved, round by round (the median is reported), after one warm-up call each; each row's model
FLOP utilisation is against this machine's matmul peak, measured first (maskplay.runtime.flops.scoring_flops counts
what each method computes).

    .venv/bin/python benchmarks/score_speed.py --sentences 200 --dtype bf16
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import re
import sys
import warnings
from contextlib import nullcontext
from pathlib import Path

import torch
from torch.ao.quantization import quantize_dynamic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved, machine, matmul_peak, resolve_dtype  # noqa: E402

from maskplay import preset  # noqa: E402
from maskplay.data.tokenizer import load_tokenizer  # noqa: E402
from maskplay.families import build_model
from maskplay.families.hf.bert import maskplay_to_hf_bert  # noqa: E402
from maskplay.families.hf.gpt import gpt_to_hf_bert_lm_head  # noqa: E402
from maskplay.runtime.allocator import keep_freed_memory  # noqa: E402
from maskplay.runtime.flops import scoring_flops  # noqa: E402
from maskplay.runtime.precision import Precision  # noqa: E402
from maskplay.tasks.score import Embedder, Scorer  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def wikitext_sentences(path: Path, n: int, min_words: int, max_words: int) -> list[str]:
    """The first n sentences of min..max words from WikiText (headings and sentences with <unk> skipped),
    detokenised a little (@-@ -> -)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("="):
            continue
        line = re.sub(r" @(.)@ ", r"\1", line)
        for sentence in re.split(r"(?<= \.) ", line):
            words = sentence.split()
            if "<unk>" in sentence or not min_words <= len(words) <= max_words:
                continue
            out.append(sentence)
            if len(out) == n:
                return out
    raise ValueError(f"{path}: only {len(out)} sentences of {min_words}-{max_words} words")


def hf_naive_pll(hf, tok, sentences: list[str], context) -> list[float]:
    """One batch per sentence holding its masked copies; logits over every position of every copy."""
    totals = []
    with torch.inference_mode(), context():
        for sentence in sentences:
            ids = tok.encode(sentence)
            n = len(ids) - 2
            copies = torch.tensor([ids] * n)
            rows, positions = torch.arange(n), torch.arange(1, n + 1)
            copies[rows, positions] = tok.special.mask
            logits = hf(input_ids=copies).logits  # (n, L, V): the head over the whole sequence
            logp = logits[rows, positions].float().log_softmax(-1)[rows, torch.tensor(ids[1:-1])]
            totals.append(float(logp.sum()))
    return totals


def hf_piece_sums(tok, sentences: list[str], batch_size: int, context, values) -> list[float]:
    """Per sentence, the sum of values(ids)[row, t] over its pieces t (between [SOS] and [EOS]): one pass per batch
    of length-sorted, right-padded sentences, as maskplay's Scorer batches, so that both carry the same padding.
    values(ids) gives a (rows, width) tensor aligned with the positions of ids."""
    encoded = [tok.encode(s) for s in sentences]
    order = sorted(range(len(encoded)), key=lambda k: -len(encoded[k]))
    out = [0.0] * len(encoded)
    with torch.inference_mode(), context():
        for start in range(0, len(order), batch_size):
            batch = order[start:start + batch_size]
            rows = [encoded[k] for k in batch]
            ids = torch.full((len(rows), max(len(r) for r in rows)), tok.special.pad, dtype=torch.long)
            for k, r in enumerate(rows):
                ids[k, :len(r)] = torch.tensor(r)
            picked = values(ids)
            for k, (index, r) in enumerate(zip(batch, rows, strict=True)):
                out[index] = float(picked[k, 1:len(r) - 1].sum())
    return out


def hf_xlnet_causal(hf_xlnet, tok, sentences: list[str], batch_size: int, context) -> list[float]:
    """Sentence log p with HuggingFace XLNet in one pass per batch: perm_mask left to right (i sees j < i),
    target_mapping = every position."""

    def values(ids: torch.Tensor) -> torch.Tensor:
        rows, width = ids.shape
        perm = torch.triu(torch.ones(width, width), diagonal=0).expand(rows, -1, -1)
        mapping = torch.eye(width).expand(rows, -1, -1)
        logp = hf_xlnet(ids, attention_mask=(ids != tok.special.pad).float(), perm_mask=perm,
                        target_mapping=mapping).logits.float()
        return logp.log_softmax(-1).gather(-1, ids[..., None])[..., 0]

    return hf_piece_sums(tok, sentences, batch_size, context, values)


def hf_causal(hf_gpt, tok, sentences: list[str], batch_size: int, context) -> list[float]:
    """Sentence log p with a HuggingFace decoder: log p(piece t | pieces before it) from the logits at t - 1 (the
    rule of maskplay's causal score: [SOS] is context, [EOS] is not scored)."""

    def values(ids: torch.Tensor) -> torch.Tensor:
        logits = hf_gpt(input_ids=ids, attention_mask=(ids != tok.special.pad).long()).logits
        picked = logits[:, :-1].float().log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]
        return torch.nn.functional.pad(picked, (1, 0))  # position t's value at column t

    return hf_piece_sums(tok, sentences, batch_size, context, values)


def hf_discriminator(hf_electra, tok, sentences: list[str], batch_size: int, context) -> list[float]:
    """Sentence log P(original) with HuggingFace's ELECTRA discriminator: log sigmoid(-logit) per piece."""

    def values(ids: torch.Tensor) -> torch.Tensor:
        logits = hf_electra(input_ids=ids, attention_mask=(ids != tok.special.pad).long()).logits.float()
        return torch.nn.functional.logsigmoid(-logits)

    return hf_piece_sums(tok, sentences, batch_size, context, values)


def hf_mean_pool(hf_bert, tok, sentences: list[str], batch_size: int, context) -> torch.Tensor:
    """sentence-transformers style: batches sorted by length, attention-masked mean over all tokens
    ([CLS]/[SEP] included, as sentence-transformers does)."""
    order = sorted(range(len(sentences)), key=lambda k: -len(sentences[k]))
    out = torch.zeros(len(sentences), hf_bert.config.hidden_size)
    with torch.inference_mode(), context():
        for start in range(0, len(order), batch_size):
            batch = order[start:start + batch_size]
            encoded = [tok.encode(sentences[k]) for k in batch]
            width = max(map(len, encoded))
            ids = torch.zeros(len(batch), width, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for r, e in enumerate(encoded):
                ids[r, :len(e)] = torch.tensor(e)
                mask[r, :len(e)] = 1
            h = hf_bert(input_ids=ids, attention_mask=mask).last_hidden_state.float()
            out[batch] = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    return out


TASKS = ("score", "xlnet", "gpt", "electra", "embed", "embed-gpt", "embed-electra", "embed-xlnet")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--dtype", choices=["auto", *(p.value for p in Precision if p.trainable)], default="auto",
                        help="bf16: maskplay runs bf16 end to end, HF gets bf16 weights; bf16-autocast: autocast for "
                             "both; auto: bf16 where this machine runs it faster, else fp32 (as maskplay's commands)")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="sentences (or PLL copies) per forward pass for maskplay, and for HF encode")
    parser.add_argument("--min-words", type=int, default=5)
    parser.add_argument("--max-words", type=int, default=60)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is reported")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS),
                        help="which rows to run (each task with its HuggingFace baseline)")
    parser.add_argument("--keep-freed-memory", action="store_true",
                        help="keep freed heap memory in the process, for both sides (as the maskplay CLI does)")
    args = parser.parse_args()
    malloc = "default" if not args.keep_freed_memory else \
        ("freed memory kept" if keep_freed_memory() else "not glibc: default")
    if args.threads:
        torch.set_num_threads(args.threads)
    peak_bf16, peak_fp32 = matmul_peak(torch.bfloat16), matmul_peak(torch.float32)
    import transformers

    tok = load_tokenizer(args.data / "tta-vocab")
    sentences = wikitext_sentences(args.data / "wikitext-103" / "wiki.valid.tokens", args.sentences,
                                   args.min_words, args.max_words)
    lengths = [len(tok.encode(s)) - 2 for s in sentences]  # pieces, [SOS]/[EOS] not counted
    pieces = sum(lengths)
    words = sum(len(s.split()) for s in sentences)

    torch.manual_seed(0)
    ids = tok.model_config_ids()
    tta = build_model(preset("tta-paper", family="tta", **ids)).eval()
    # type_vocab_size=1: HuggingFace always adds a token-type embedding; with one, the weights map 1:1.
    bert = build_model(preset("tta-paper", family="bert", type_vocab_size=1, **ids)).eval()
    cfg = bert.config
    hf_config = transformers.BertConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads, intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_position, type_vocab_size=1, layer_norm_eps=cfg.layer_norm_eps,
        pad_token_id=cfg.pad_token_id, attn_implementation="sdpa")
    hf = transformers.BertForMaskedLM(hf_config).eval()
    from maskplay.families.hf import to_hf

    xlnet = build_model(preset("tta-paper", family="xlnet", **ids)).eval()
    (xl_config, xl_state), = to_hf(xlnet)
    hf_xlnet = transformers.XLNetLMHeadModel(transformers.XLNetConfig(**xl_config)).eval()
    hf_xlnet.load_state_dict(xl_state, strict=True)
    gpt = build_model(preset("tta-paper", family="gpt", **ids)).eval()
    gpt_config, gpt_state = gpt_to_hf_bert_lm_head(gpt)
    hf_gpt = transformers.BertLMHeadModel(transformers.BertConfig(**{k: v for k, v in gpt_config.items()
                                                                     if k != "architectures"})).eval()
    hf_gpt.load_state_dict(gpt_state, strict=True)
    electra = build_model(preset("tta-paper", family="electra", **ids)).eval()
    (electra_config, electra_state), _ = to_hf(electra)
    hf_electra = transformers.ElectraForPreTraining(transformers.ElectraConfig(
        **{k: v for k, v in electra_config.items() if k != "architectures"})).eval()
    hf_electra.load_state_dict(electra_state, strict=True)
    loaded = hf.load_state_dict(maskplay_to_hf_bert(bert.state_dict()), strict=False)
    assert not loaded.unexpected_keys and all(k.endswith("_ids") for k in loaded.missing_keys), loaded

    args.dtype = resolve_dtype(args.dtype, tta.config, args.batch_size * 32)
    precision = Precision(args.dtype)
    context = nullcontext
    hf_bert_fp32 = copy.deepcopy(hf.bert)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notices
        hf_int8 = quantize_dynamic(copy.deepcopy(hf), {torch.nn.Linear}, dtype=torch.qint8)
    hf_bert_int8 = hf_int8.bert
    if precision is Precision.bf16_autocast:
        context = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    elif precision is Precision.bf16:
        hf = hf.to(torch.bfloat16)  # after the weights were copied from the maskplay model (which stays fp32)
        hf_gpt = hf_gpt.to(torch.bfloat16)
        hf_electra = hf_electra.to(torch.bfloat16)
    # HuggingFace XLNet's two-stream path fails with bf16 weights (its relative-position einsum mixes dtypes): its
    # bf16 route is autocast
    xlnet_context = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if precision in (  # noqa: E731
        Precision.bf16, Precision.bf16_autocast) else nullcontext
    hf_bert = hf.bert
    tta_scorer = Scorer(tta, tok, batch_size=args.batch_size, precision=precision)
    tta_scorer8 = Scorer(tta, tok, batch_size=args.batch_size, precision=Precision.int8)
    pll_scorer = Scorer(bert, tok, batch_size=args.batch_size, method="pll", precision=precision)
    xlnet_scorer = Scorer(xlnet, tok, batch_size=args.batch_size, method="causal", precision=precision)
    gpt_scorer = Scorer(gpt, tok, batch_size=args.batch_size, method="causal", precision=precision)
    electra_scorer = Scorer(electra, tok, batch_size=args.batch_size, method="discriminator", precision=precision)
    unilm = build_model(preset("tta-paper", family="unilm", **ids)).eval()
    embedders = {name: Embedder(model, tok, precision=precision)
                 for name, model in (("gpt", gpt), ("electra", electra), ("xlnet", xlnet), ("unilm", unilm))}
    tta_embed = Embedder(tta, tok, precision=precision)
    bert_embed = Embedder(bert, tok, precision=precision)
    tta_embed8 = Embedder(tta, tok, precision=Precision.int8)
    bert_embed8 = Embedder(bert, tok, precision=Precision.int8)

    # the two PLLs must agree: the same weights, the same rule (every piece, [SOS]/[EOS] not scored)
    diff = math.nan
    if "score" in args.tasks:
        ours = pll_scorer.score(sentences)
        theirs = hf_naive_pll(hf, tok, sentences, context)
        diff = max(abs(a.log_prob - b) for a, b in zip(ours, theirs, strict=True))
    xl_diff = max(abs(a.log_prob - b) for a, b in zip(xlnet_scorer.score(sentences),
                                                       hf_xlnet_causal(hf_xlnet, tok, sentences, args.batch_size,
                                                                       xlnet_context), strict=True))
    gpt_diff = max(abs(a.log_prob - b) for a, b in zip(gpt_scorer.score(sentences),
                                                        hf_causal(hf_gpt, tok, sentences, args.batch_size, context),
                                                        strict=True))
    electra_diff = max(abs(a.log_prob - b) for a, b in zip(
        electra_scorer.score(sentences), hf_discriminator(hf_electra, tok, sentences, args.batch_size, context),
        strict=True))

    cases = {  # (task, name, call, FLOPs per call, baseline row of the task)
        "tta": ("score", "T-TA one pass (maskplay)", lambda: tta_scorer.score(sentences), "one-pass", tta.config),
        "tta8": ("score", "T-TA one pass, int8 (maskplay)", lambda: tta_scorer8.score(sentences), "one-pass",
                 tta.config),
        "pll": ("score", "BERT PLL bucketed (maskplay)", lambda: pll_scorer.score(sentences), "pll", cfg),
        "hf_pll": ("score", "BERT PLL naive (HF BertForMaskedLM)",
                   lambda: hf_naive_pll(hf, tok, sentences, context), "pll-naive", cfg),
        "hf_pll8": ("score", "BERT PLL naive, HF, torch.ao int8",
                    lambda: hf_naive_pll(hf_int8, tok, sentences, nullcontext), "pll-naive", cfg),
        "xlnet": ("xlnet", "XLNet causal, one pass (maskplay)", lambda: xlnet_scorer.score(sentences),
                  "two-stream", xlnet.config),
        "hf_xlnet": ("xlnet", "XLNet causal, one pass (HF XLNetLMHead)",
                     lambda: hf_xlnet_causal(hf_xlnet, tok, sentences, args.batch_size, xlnet_context),
                     "two-stream-full",
                     xlnet.config),
        "gpt": ("gpt", "GPT causal, one pass (maskplay)", lambda: gpt_scorer.score(sentences), "one-pass",
                gpt.config),
        "hf_gpt": ("gpt", "GPT causal, one pass (HF BertLMHeadModel)",
                   lambda: hf_causal(hf_gpt, tok, sentences, args.batch_size, context), "one-pass-full", gpt.config),
        "electra": ("electra", "ELECTRA discriminator, one pass (maskplay)", lambda: electra_scorer.score(sentences),
                    "encode", electra.config),
        "hf_electra": ("electra", "ELECTRA discriminator (HF ElectraForPreTraining)",
                       lambda: hf_discriminator(hf_electra, tok, sentences, args.batch_size, context), "encode",
                       electra.config),
        "e_tta": ("embed", "T-TA encode, mean (maskplay)",
                  lambda: tta_embed.encode(sentences, batch_size=args.batch_size), "encode", tta.config),
        "e_bert": ("embed", "BERT encode, mean (maskplay)",
                   lambda: bert_embed.encode(sentences, batch_size=args.batch_size), "encode", cfg),
        "e_unilm": ("embed", "UniLM encode, mean (maskplay)",
                    lambda: embedders["unilm"].encode(sentences, batch_size=args.batch_size), "encode", unilm.config),
        "e_gpt": ("embed-gpt", "GPT encode, mean (maskplay)",
                  lambda: embedders["gpt"].encode(sentences, batch_size=args.batch_size), "encode", gpt.config),
        "e_hf_gpt": ("embed-gpt", "HF BertLMHeadModel's encoder, mean",
                     lambda: hf_mean_pool(hf_gpt.bert, tok, sentences, args.batch_size, context), "encode", gpt.config),
        "e_electra": ("embed-electra", "ELECTRA encode, mean (maskplay)",
                      lambda: embedders["electra"].encode(sentences, batch_size=args.batch_size), "encode",
                      electra.config),
        "e_hf_electra": ("embed-electra", "HF ElectraModel, mean",
                         lambda: hf_mean_pool(hf_electra.electra, tok, sentences, args.batch_size, context), "encode",
                         electra.config),
        "e_xlnet": ("embed-xlnet", "XLNet encode, mean (maskplay)",
                    lambda: embedders["xlnet"].encode(sentences, batch_size=args.batch_size), "encode", xlnet.config),
        "e_hf_xlnet": ("embed-xlnet", "HF XLNetModel, mean",
                       lambda: hf_mean_pool(hf_xlnet.transformer, tok, sentences, args.batch_size, xlnet_context),
                       "encode", xlnet.config),
        "e_tta8": ("embed", "T-TA encode, mean, int8 (maskplay)",
                   lambda: tta_embed8.encode(sentences, batch_size=args.batch_size), "encode", tta.config),
        "e_bert8": ("embed", "BERT encode, mean, int8 (maskplay)",
                    lambda: bert_embed8.encode(sentences, batch_size=args.batch_size), "encode", cfg),
        "e_hf": ("embed", "HF BertModel, mean pooling",
                 lambda: hf_mean_pool(hf_bert, tok, sentences, args.batch_size, context), "encode", cfg),
        "e_hf8": ("embed", "HF BertModel, mean, torch.ao int8",
                  lambda: hf_mean_pool(hf_bert_int8, tok, sentences, args.batch_size, nullcontext), "encode", cfg),
    }
    cases = {k: c for k, c in cases.items() if c[0] in args.tasks}
    seconds = interleaved({k: c[2] for k, c in cases.items()}, args.rounds)
    baselines = {"score": ("hf_pll", "hf_pll8"), "xlnet": ("hf_xlnet",), "gpt": ("hf_gpt",), "electra": ("hf_electra",),
                 "embed": ("e_hf", "e_hf8"), "embed-gpt": ("e_hf_gpt",), "embed-electra": ("e_hf_electra",),
                 "embed-xlnet": ("e_hf_xlnet",)}
    base = {task: seconds[keys[0]] for task, keys in baselines.items() if task in args.tasks}
    fastest_hf = {task: min(keys, key=seconds.__getitem__) for task, keys in baselines.items() if task in args.tasks}
    best = {task: seconds[key] for task, key in fastest_hf.items()}

    def min_cosine(a: torch.Tensor, b: torch.Tensor) -> float:
        return float(torch.nn.functional.cosine_similarity(torch.as_tensor(a), torch.as_tensor(b)).min())

    cosines = {  # int8 embeddings against the fp32 ones of the same model
        "e_tta8": min_cosine(tta_embed8.encode(sentences), Embedder(tta, tok).encode(sentences)),
        "e_bert8": min_cosine(bert_embed8.encode(sentences), Embedder(bert, tok).encode(sentences)),
        "e_hf8": min_cosine(hf_mean_pool(hf_bert_int8, tok, sentences, args.batch_size, nullcontext),
                            hf_mean_pool(hf_bert_fp32, tok, sentences, args.batch_size, nullcontext)),
    } if "embed" in args.tasks else {}

    print(machine())
    print(f"matmul peak (2048^3): bf16 {peak_bf16 / 1e9:.0f} GFLOP/s, fp32 {peak_fp32 / 1e9:.0f} GFLOP/s")
    print(f"{len(sentences)} WikiText-103 valid sentences, {args.min_words}-{args.max_words} words "
          f"(mean {words / len(sentences):.1f} words, {pieces / len(sentences):.1f} pieces); tta-paper size "
          f"(3x512, 8 heads, FFN 2048, vocab {cfg.vocab_size}), random weights")
    print(f"transformers {transformers.__version__}, {args.dtype}, batch {args.batch_size}, malloc: {malloc}, "
          f"median of {args.rounds} interleaved rounds; MFU against the {args.dtype.split('-')[0]} peak "
          "(int8 rows too)")
    peak = peak_fp32 if precision is Precision.fp32 else peak_bf16
    print(f"{'task':<6} {'method':<38} {'seconds':>8} {'sent/s':>8} {'vs HF':>7} {'vs best':>8} {'MFU':>7}")
    rows = []
    for key, (task, name, _, method, config) in cases.items():
        t = seconds[key]
        flops = scoring_flops(config, lengths, method)
        mfu = flops / t / peak
        rows.append({"case": key, "task": task, "method": name, "seconds": t, "sentences_per_s": len(sentences) / t,
                     "speed_up": base[task] / t, "speed_up_vs_best": best[task] / t, "mfu": mfu, "flops": flops})
        print(f"{task:<6} {name:<38} {t:>8.2f} {len(sentences) / t:>8.1f} {base[task] / t:>6.2f}x {best[task] / t:>7.2f}x "
              f"{mfu:>6.1%}")
    print(f"vs HF = vs the HF row of the task at {args.dtype}; vs best = vs the fastest HF row of the task ("
          + "; ".join(f"{task}: {cases[key][1]}" for task, key in fastest_hf.items()) + ")"
          + (f". T-TA one pass vs bucketed PLL: {seconds['pll'] / seconds['tta']:.1f}x" if "score" in args.tasks else ""))
    bound = {}
    if "score" in args.tasks:
        # The arithmetic behind T-TA's ratio: ratio = (HF's FLOPs / T-TA's FLOPs) x (T-TA's MFU / HF's MFU). The
        # first factor is fixed by the sentences' lengths; only the second is the implementation's.
        by_case = {r["case"]: r for r in rows}
        hf_row = by_case[fastest_hf["score"]]
        flop_ratio = hf_row["flops"] / by_case["tta"]["flops"]
        bound = {"flop_ratio_best_hf_pll_over_tta": flop_ratio, "best_hf_mfu": hf_row["mfu"],
                 "tta_mfu_for_30x": 30 / flop_ratio * hf_row["mfu"]}
        print(f"bound: the fastest HF PLL ({hf_row['method']}) does {flop_ratio:.1f}x T-TA's FLOPs at {hf_row['mfu']:.0%} "
              f"MFU; T-TA's ratio = {flop_ratio:.1f} x its MFU / {hf_row['mfu']:.0%}, so 30x needs T-TA at "
              f"{bound['tta_mfu_for_30x']:.0%} MFU (T-TA: " + ", ".join(
                  f"{by_case[k]['method']} {by_case[k]['mfu']:.0%}" for k in ("tta", "tta8") if k in by_case) + ")")
    print(f"check: max |sentence log p (maskplay XLNet causal) - (HF XLNet)| = {xl_diff:.2e} nats")
    print(f"check: max |sentence log p (maskplay GPT causal) - (HF BertLMHeadModel)| = {gpt_diff:.2e} nats")
    print(f"check: max |sentence log P(original) (maskplay ELECTRA) - (HF ElectraForPreTraining)| = "
          f"{electra_diff:.2e} nats")
    print(f"check: max |sentence log p (maskplay PLL) - (HF naive PLL)| = {diff:.2e} nats; "
          "maskplay BERT encode excludes [SOS]/[EOS] from the mean, HF includes them")
    print("int8 embeddings vs fp32 of the same model, lowest cosine similarity over the sentences: "
          + ", ".join(f"{cases[k][1]} {v:.5f}" for k, v in cosines.items()))
    if args.out:
        Path(args.out).write_text(json.dumps({"machine": machine(), "peak_bf16": peak_bf16, "peak_fp32": peak_fp32,
                                              "args": {k: os.path.relpath(v) if isinstance(v, Path) else str(v)
                                                       for k, v in vars(args).items()},  # no machine paths
                                              "malloc": malloc, "pll_max_diff": diff, "xlnet_max_diff": xl_diff,
                                              "gpt_max_diff": gpt_diff, "electra_max_diff": electra_diff,
                                              "int8_min_cosine": cosines, "tta_bound": bound,
                                              "rows": rows},
                                             indent=2) + "\n")


if __name__ == "__main__":
    main()
