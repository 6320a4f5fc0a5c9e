"""TeacherStudent (noisy-gibbs spec §4, §6.1-6.2): the generative process of eq. 7, noiseless
labels, exposed teacher and latents, determinism and bad inputs."""
import math

import pytest
import torch

from lit_bayes.data.teacher_student import TeacherStudent


def teacher_params(data):
    return {n: p.detach().double().unsqueeze(0) for n, p in data.teacher.named_parameters()}


def test_training_data_follow_the_generative_process():
    """Residuals of every layer of eq. 7 have the stated noise variances; weights their prior's."""
    data = TeacherStudent(widths=(40, 30, 1), delta_z=[0.05, 0.02], delta_x=0.1, num_train=4000, num_test=50, seed=3)
    data.setup()
    x, y = data.train_data.tensors
    lat = data.train_latents
    layers = data.teacher.layers
    checks = {
        "z2 | x": lat["z2"] - layers[0](x),
        "x2 | z2": lat["x2"] - lat["z2"].relu(),
        "y | x2": y - layers[1](lat["x2"])[:, 0],
    }
    for (name, residual), variance in zip(checks.items(), (0.05, 0.1, 0.02)):
        residual = residual.double().flatten()
        assert abs(residual.mean()) < 4.5 * math.sqrt(variance / residual.numel()), name
        assert abs(residual.var() / variance - 1) < 4.5 * math.sqrt(2 / residual.numel()), name
    weight = layers[0].weight.double().flatten()  # prior variance 1 / fan-in = 1/40
    assert abs(weight.var() * 40 - 1) < 4.5 * math.sqrt(2 / weight.numel())


def test_noiseless_labels_and_noiseless_test_split():
    data = TeacherStudent(widths=(5, 4, 1), activation="abs", delta_z=0.5, delta_x=0.5, num_train=30, num_val=7,
                          num_test=20, noiseless_labels=True, seed=0)
    data.setup()
    for split in (data.train_data, data.val_data, data.test_data):
        x, y = split.tensors
        torch.testing.assert_close(y, data.teacher(x)[:, 0], rtol=1e-5, atol=1e-5)
    x, _ = data.train_data.tensors
    torch.testing.assert_close(data.train_latents["x2"], data.teacher.layers[0](x).abs(), rtol=1e-5, atol=1e-5)


def test_probit_labels_are_the_argmax_of_the_noisy_scores():
    data = TeacherStudent(widths=(6, 5, 4), delta_z=0.3, delta_x=0.2, output="probit", num_train=200, num_test=100,
                          seed=1)
    data.setup()
    _, y = data.train_data.tensors
    assert data.task == "classification" and data.num_classes == 4 and y.dtype == torch.int64
    assert torch.equal(y, data.train_latents["z3"].argmax(-1))
    x_test, y_test = data.test_data.tensors
    assert torch.equal(y_test, data.teacher(x_test).argmax(-1))
    assert len(torch.unique(y)) > 1


def test_same_seed_same_data_other_seed_other_teacher():
    def build(seed):
        data = TeacherStudent(widths=(3, 2, 1), num_train=10, num_test=5, seed=seed)
        data.setup()
        return data
    a, b, c = build(0), build(0), build(1)
    assert torch.equal(a.train_data.tensors[1], b.train_data.tensors[1])
    assert all(torch.equal(p, q) for p, q in zip(teacher_params(a).values(), teacher_params(b).values()))
    assert not torch.equal(a.teacher.layers[0].weight, c.teacher.layers[0].weight)


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_train=0), "num_train must be an integer >= 1"),
    (dict(noiseless_labels="no"), "noiseless_labels must be True or False"),
    (dict(widths=(3, 2)), "widths must end in 1"),
    (dict(delta_x=0.0), "delta_x must be a finite number > 0"),
    (dict(batch_size=0), "batch_size must be a positive integer or None"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TeacherStudent(**kwargs)
