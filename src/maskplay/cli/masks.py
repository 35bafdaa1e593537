"""`maskplay masks`: a family's attention mask drawn as a picture."""

from __future__ import annotations

import argparse

from ..nn.masks import mask_pictures
from .common import non_negative_int, positive_int
from .summaries import summary


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("masks", help=summary("masks"))
    pictures = ", ".join(mask_pictures())  # every registered family's masks (a two-stream family's streams apart)
    p.add_argument("--family", choices=[*mask_pictures(), "all"], default="tta",
                   help=f"the mask to draw: {pictures}; or all of them")
    p.add_argument("--length", type=positive_int, default=8)
    p.add_argument("--padding", type=non_negative_int, default=0, help="padded positions at the end of the sequence")
    p.add_argument("--out", default="mask.png")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..runtime.files import prepare_output_file
    from ..tasks.viz import draw_masks

    chosen = args.family
    names = [name for name, picture in mask_pictures().items() if picture.in_all] if chosen == "all" else [chosen]
    prepare_output_file(args.out)
    out = draw_masks(names, args.length, args.out, padding=args.padding)
    print(f"wrote {out}")
    return 0
