import pytest

from maskplay.cli import main
from maskplay.tasks.viz import example_mask


def test_masks_command_draws_a_png(tmp_path, capsys):
    out = tmp_path / "mask.png"
    assert main(["masks", "--family", "tta", "--length", "8", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(out) in capsys.readouterr().out


def test_example_masks_are_the_family_masks():
    tta = example_mask("tta", 5, padding=1)
    assert not tta.diagonal().any() and not tta[:, 4].any() and tta[0, 1]
    assert example_mask("gpt", 4).tril().equal(example_mask("gpt", 4))


def test_bad_padding_is_a_clear_error(capsys):
    assert main(["masks", "--length", "4", "--padding", "9", "--out", "x.png"]) == 2
    assert "--padding must be in [0, 3]" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["masks", "--family", "nope"])
