"""The host's work between two training steps, with and without data.prepare_ahead, in one invocation: `maskplay
pretrain`'s own loop (maskplay.tasks.train.train) on a strict-small recipe's data path (256 packed rows of 128
pieces, the family's masking), timed from the end of one step (Stepper.step returns: the update queued) to the
start of the next one's forward. On a GPU that is where the device waits for the host: the step ended with the
host reading the loss, so the device has only the update queued while the host fetches, masks and sends the next
batch, unless the next batch was made during the step before (prepare_ahead). A CPU measures the host's part; what
it costs a GPU is the GPU run's (docs/results/training-speed.md).

The model is shrunk (model.preset=tiny, one layer) so that the steps are quick; the gap does not depend on its size.

    maskplay prepare --corpus ../shared/data/enwiki-wikiextractor/wiki_00.gz \\
      --tokenizer src/maskplay/assets/gpt-two-hour/tokenizer.json --out runs/data-wiki00 --max-length 128
    python benchmarks/probes/step_gap.py --data runs/data-wiki00 --out results/probes/step-gap/xeon-amx.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from maskplay.config import apply_overrides
from maskplay.tasks.train import load_train_config, stepping, train

REPO = Path(__file__).resolve().parents[2]


def gaps(family: str, data: str, ahead: bool, steps: int, workers: int, threads: int) -> list[float]:
    """Seconds from each step's end to the next step's first forward, over `steps` steps of the recipe."""
    config = load_train_config(REPO / "configs" / "babylm" / f"strict-small-{family}.toml")
    marks: list[tuple[str, float]] = []
    step, forward = stepping.Stepper.step, stepping.Stepper.micro_step

    def timed_step(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        out = step(self, *args, **kwargs)
        marks.append(("end", time.perf_counter()))
        return out

    def timed_forward(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        marks.append(("forward", time.perf_counter()))
        return forward(self, *args, **kwargs)

    with tempfile.TemporaryDirectory() as out:
        config = apply_overrides(config, [
            "model.preset=tiny", "model.num_layers=1", "model.max_position=128", f"data.path={data}",
            f"run.out_dir={out}", f"optim.max_steps={steps}", "optim.warmup_steps=1", "optim.cooldown_steps=1",
            "run.max_words=none", "run.checkpoint_at_words=[]", "run.eval_every=0", "run.save_every=0",
            "run.progress=false", "run.tensorboard=false", "run.device=cpu", f"run.threads={threads}",
            f"data.num_workers={workers}", f"data.prepare_ahead={str(ahead).lower()}", "optim.ema_debias=false",
            "optim.ema=0"])
        stepping.Stepper.step, stepping.Stepper.micro_step = timed_step, timed_forward
        try:
            train(config.validate())
        finally:
            stepping.Stepper.step, stepping.Stepper.micro_step = step, forward
    out_gaps = []
    for (kind, t), (next_kind, t_next) in zip(marks, marks[1:], strict=False):
        if kind == "end" and next_kind == "forward":
            out_gaps.append(t_next - t)
    return out_gaps[2:]  # the first steps warm up the loader


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="a prepared directory (maskplay prepare, --max-length 128)")
    p.add_argument("--families", nargs="+", default=["gpt-bert", "bert", "tta", "gpt"])
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--workers", type=int, default=1, help="data.num_workers (the GPU script gives 4)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    rows = []
    for family in args.families:
        row: dict = {"family": family}
        for ahead in (False, True):
            g = gaps(family, args.data, ahead, args.steps, args.workers, args.threads)
            row["ahead" if ahead else "plain"] = {"median_ms": 1e3 * statistics.median(g), "steps": len(g)}
        row["plain_over_ahead"] = row["plain"]["median_ms"] / row["ahead"]["median_ms"]
        rows.append(row)
        print(f"{family:>9}: between steps {row['plain']['median_ms']:.2f} ms plain, "
              f"{row['ahead']['median_ms']:.2f} ms with data.prepare_ahead ({row['plain_over_ahead']:.1f}x)")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if k not in ("data", "out")},
                                              "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
