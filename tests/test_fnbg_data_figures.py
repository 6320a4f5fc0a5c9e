"""recipes/fnbg/data_figures.py (FNBG Figs. 9 and 10): the XOR figure draws the DataModule's training points
with their labels, and the augmentation grid draws exactly the training images TorchvisionImages makes with
each Table 4 transform (MNIST idx files of random pixels)."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.transforms.functional as F

from lit_bayes.data import NoisyXOR, TorchvisionImages
from lit_bayes.data import transforms
from tests.script_modules import load_script
from tests.test_data import write_mnist

FNBG = Path(__file__).resolve().parents[1] / "recipes" / "fnbg"


@pytest.fixture
def script():
    return load_script("data_figures", FNBG / "data_figures.py")


def test_xor_figure_draws_the_training_points_by_label(script):
    x, y = script.xor_training_set(5000, 0)
    expected_x, expected_y = NoisyXOR(num_val=0, seed=0).load()["train"]  # the recipes' training set
    assert torch.equal(x, expected_x) and torch.equal(y, expected_y) and len(y) == 5000
    clusters = script.xor_clusters(x, y)
    assert [c["count"] for c in clusters] == [1250] * 4
    assert [c["labels"] for c in clusters] == [[0], [1], [1], [0]]
    assert clusters[3]["x1"][0] > 0.55 - 1e-6 and clusters[0]["x1"][1] < 0.45
    axes = script.xor_figure(x, y).axes[0]
    zeros, ones = (np.asarray(c.get_offsets()) for c in axes.collections)
    assert np.array_equal(zeros, x[y == 0].numpy()) and np.array_equal(ones, x[y == 1].numpy())
    assert (axes.get_xlabel(), axes.get_ylabel()) == ("x1", "x2") and "n = 5000" in axes.get_title()


def test_grid_shows_the_transformed_training_images(script, tmp_path):
    write_mnist(tmp_path, "MNIST", n_train=24, n_test=10)  # labels 0, 1, ..., 9, 0, 1, ...
    out = tmp_path / "out"
    script.main(["--root", str(tmp_path), "--num-train", "40", "--images", "6", "--seed", "4", "--out", str(out)])
    result = json.loads((out / "data_figures.json").read_text())
    assert [c["count"] for c in result["xor"]["clusters"]] == [10] * 4
    rows = result["mnist"]["images"]
    assert [r["index"] for r in rows] == [r["label"] for r in rows] == list(range(6))
    assert (out / "fig9.png").stat().st_size > 0 and (out / "fig10.png").stat().st_size > 0

    images, _ = TorchvisionImages("mnist", tmp_path, standardize="none").load()["train"]
    originals = images[:6]
    copies = {}
    for name, transform in (("rotated", transforms.fnbg_rotation), ("blurred", transforms.fnbg_blur),
                            ("inverted", transforms.fnbg_inversion)):
        trained_on, _ = TorchvisionImages("mnist", tmp_path, standardize="none", seed=4,
                                          train_transform=transform).load()["train"]
        copies[name] = trained_on[:6]
        assert torch.equal(script.augmented(originals, transform, 4), copies[name])
    for k, row in enumerate(rows):
        rotated = F.rotate(originals[k], row["angle"], fill=[0.0])
        assert -30 <= row["angle"] <= 30 and torch.equal(rotated, copies["rotated"][k])
        assert not torch.equal(copies["rotated"][k], originals[k])
        blurred = copies["blurred"][k]
        assert row["blurred"] == (not torch.equal(blurred, originals[k]))
        assert blurred.mean().item() == pytest.approx(originals[k].mean().item(), abs=0.02)
        assert torch.equal(copies["inverted"][k], 1 - originals[k] if row["inverted"] else originals[k])
    assert len({r["blurred"] for r in rows}) == len({r["inverted"] for r in rows}) == 2  # seed 4: both kinds

    notes = [{"rotated": "", "blurred": "", "inverted": ""}] * 6
    grid = script.augmentation_figure(originals, copies, list(range(6)), notes).axes
    drawn = [np.asarray(axis.images[0].get_array()) for axis in grid]
    columns = [originals, copies["rotated"], copies["blurred"], copies["inverted"]]
    assert len(drawn) == 24
    assert all(np.array_equal(drawn[4 * k + c], columns[c][k, 0].numpy()) for k in range(6) for c in range(4))


@pytest.mark.parametrize("argv, message", [(["--images", "0"], "--images"), (["--images", "11"], "--images"),
                                           (["--num-train", "6"], "--num-train"), (["--seed", "-1"], "--seed")])
def test_bad_arguments_are_named(script, tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit):
        script.main(argv + ["--out", str(tmp_path)])
    assert message in capsys.readouterr().err


def test_a_missing_digit_is_named(script):
    with pytest.raises(ValueError, match="digit 2"):
        script.first_of_each_digit(torch.tensor([1, 0, 1, 3]), 3)
