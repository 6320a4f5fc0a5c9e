"""lit_bayes.data.transforms: the FNBG Table 4 training-set transforms, by import path in a config
(recipes/fnbg/mnist_fnbg_<name>.yaml laid over mnist_fnbg.yaml), each keeping the image's shape."""
from pathlib import Path

import pytest
import torch

from lit_bayes.cli import main
from lit_bayes.data import transforms

FNBG = Path(__file__).resolve().parents[1] / "recipes" / "fnbg"


@pytest.mark.parametrize("name", ["rotation", "blur", "inversion"])
def test_overlay_names_the_transform(name, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", str(FNBG / "mnist_fnbg.yaml"), "-c", str(FNBG / f"mnist_fnbg_{name}.yaml"), "--print_config"])
    assert exit_info.value.code in (0, None)
    assert f"train_transform: lit_bayes.data.transforms.fnbg_{name}" in capsys.readouterr().out


def test_transforms_keep_the_shape_and_inversion_is_one_minus_x():
    torch.manual_seed(0)
    image = torch.rand(1, 28, 28)
    for transform in (transforms.fnbg_rotation, transforms.fnbg_blur, transforms.fnbg_inversion):
        assert transform(image).shape == image.shape
    outcomes = [transforms.fnbg_inversion(image) for _ in range(40)]
    assert all(torch.equal(o, image) or torch.allclose(o, 1 - image) for o in outcomes)
    assert any(torch.equal(o, image) for o in outcomes) and not all(torch.equal(o, image) for o in outcomes)
