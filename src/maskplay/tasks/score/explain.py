"""Show where a sentence surprises the model: each piece coloured by its surprisal (-log p, nats) on a fixed
scale, so colours compare across sentences, and the most surprising word marked. For ELECTRA's discriminator
the number shown is the probability that the piece was replaced, P(replaced) = 1 - P(original), and the word
marked is the one least likely to be original (the largest -log P(original))."""

from __future__ import annotations

import math

from .scorer import SentenceScore

# ANSI 256-colour foregrounds from calm to alarming, one per SCALE bin (upper bounds in nats, the last open).
COLOURS = (34, 70, 142, 178, 214, 208, 202, 196)
SCALE = (1.0, 2.0, 3.0, 4.5, 6.0, 8.0, 10.0)
RESET = "\033[0m"
BOLD_UNDERLINE = "\033[1;4m"


def colour_of(surprisal: float) -> int:
    for bound, colour in zip(SCALE, COLOURS[:-1], strict=True):
        if surprisal < bound:
            return colour
    return COLOURS[-1]


def legend(colour: bool, replaced: bool = False) -> str:
    if replaced:
        text = "P(replaced) per piece, from the discriminator; ** marks the word least likely to be original"
        if not colour:
            return text
        return text + "; colours by -log P(original): " + " ".join(
            f"\033[38;5;{c}m{lo:g}+{RESET}" for c, lo in zip(COLOURS, (0.0, *SCALE), strict=True))
    if not colour:
        return "surprisal = -log p in nats per piece; ** marks the most surprising word"
    lows = (0.0, *SCALE)
    cells = [f"\033[38;5;{c}m{lo:g}+{RESET}" for c, lo in zip(COLOURS, lows, strict=True)]
    return "surprisal (nats): " + " ".join(cells) + f"   {BOLD_UNDERLINE}word{RESET} = most surprising word"


def explain(score: SentenceScore, colour: bool) -> str:
    """The sentence as written, pieces coloured (colour=True) or annotated piece(surprisal) (colour=False),
    followed by a line naming the most surprising word."""
    words = score.words()
    worst = max(words, key=lambda w: w.surprisal)
    replaced = score.replaced_probs
    text, parts, cursor = score.text, [], 0
    for k, (start, end) in enumerate(score.offsets):
        if start > cursor:
            parts.append(text[cursor:start])  # whitespace and anything the tokenizer dropped, uncoloured
        piece = text[start:end]
        surprisal = -score.token_log_probs[k]
        in_worst = k in worst.pieces
        if colour:
            style = f"\033[38;5;{colour_of(surprisal)}m" + (BOLD_UNDERLINE if in_worst else "")
            parts.append(f"{style}{piece}{RESET}")
        else:
            opened = "**" if in_worst and k == worst.pieces[0] else ""
            closed = "**" if in_worst and k == worst.pieces[-1] else ""
            shown = f"{surprisal:.2f}" if replaced is None else f"p={replaced[k]:.2f}"
            parts.append(f"{opened}{piece}({shown}){closed}")
        cursor = max(cursor, end)
    parts.append(text[cursor:])
    if replaced is not None:
        p_word = -math.expm1(worst.log_prob)  # P(some piece of the word was replaced), pieces independent
        return "".join(parts) + "\n" + (
            f"  most likely replaced: {worst.text!r} (P(replaced) = {p_word:.2f}); sentence log P(original) = "
            f"{score.log_prob:.2f} over {score.num_tokens} pieces")
    note = (f"  most surprising word: {worst.text!r} ({worst.surprisal:.2f} nats"
            f"{', ' + str(len(worst.pieces)) + ' pieces' if len(worst.pieces) > 1 else ''}); "
            f"sentence log p = {score.log_prob:.2f} over {score.num_tokens} pieces")
    return "".join(parts) + "\n" + note
