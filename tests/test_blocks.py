"""Parameter partitions (FNBG spec §2.2): the paper's examples, block counts and every error."""
import pytest
import torch

from lit_bayes.blocks import (
    finer_node_partition,
    fully_factorised,
    layer_partition,
    modulo_partition,
    node_partition,
    random_partition,
    user_partition,
)
from lit_bayes.models import MLP


def shapes(widths):
    return {name: tuple(p.shape) for name, p in MLP(widths).named_parameters()}


MNIST = shapes([784, 10, 10, 10, 10])  # 8180 parameters: 7850 / 110 / 110 / 110


def test_spec_toy_example_mlp_3_2_2_2_with_beta_1_equal_2():
    """theta_z(1) = w_{1,1,1:2}, theta_z(2) = (w_{1,1,3}, b_{1,1}), theta_z(3) = w_{1,2,1:2},
    theta_z(4) = (w_{1,2,3}, b_{1,2}); flat order: w_1 row-major (indices 0-5), then b_1 (6, 7)."""
    p = finer_node_partition(shapes([3, 2, 2, 2]), beta=[2, 1, 1])
    assert [p.members(q).tolist() for q in range(4)] == [[0, 1], [2, 6], [3, 4], [5, 7]]
    assert p.layers[:4] == ["layers.0"] * 4 and p.nodes[:4] == ["layers.0.0", "layers.0.0", "layers.0.1", "layers.0.1"]
    # layer 1 holds 1 block of 8 (layer), 2 of 4 (node), 4 of 2 (finer node)
    assert layer_partition(shapes([3, 2, 2, 2])).sizes()[0] == 8
    assert node_partition(shapes([3, 2, 2, 2])).sizes()[:2].tolist() == [4, 4]
    assert p.sizes()[:4].tolist() == [2, 2, 2, 2]
    assert p.num_blocks == 4 + 2 + 2 and p.sizes()[4:].tolist() == [3] * 4


def test_mnist_mlp_beta_1_equal_10_gives_130_blocks_of_79_78_and_11():
    p = finer_node_partition(MNIST, beta=[10, 1, 1, 1])
    sizes = p.sizes().tolist()
    assert p.num_blocks == 130 and p.num_params == 8180
    assert sizes[:10] == [79] * 5 + [78] * 5  # one node: 785 parameters, larger sub-blocks first
    assert sorted(set(sizes[:100])) == [78, 79] and sizes[100:] == [11] * 30
    bias_0 = 7840  # b_{1,1} sits in the last sub-block of node 1
    assert p.block_ids[bias_0] == 9 and p.members(9)[-1] == bias_0
    assert p.layers.count("layers.0") == 100 and len(set(p.nodes)) == 40
    # the same blocks from a maximum size
    assert torch.equal(finer_node_partition(MNIST, max_block_size=79).block_ids, p.block_ids)


def test_reference_code_chunk_size_gives_810_blocks():
    p = finer_node_partition(MNIST, subblock_size=[10, None, None, None])
    sizes = p.sizes().tolist()
    assert p.num_blocks == 810 and sizes[:78] == [11] * 5 + [10] * 73 and sizes[780:] == [11] * 30


def test_layer_and_node_counts():
    layer = layer_partition(MNIST)
    assert layer.sizes().tolist() == [7850, 110, 110, 110] and layer.layers == [f"layers.{j}" for j in range(4)]
    node = node_partition(MNIST)
    assert node.num_blocks == 40 and node.sizes().tolist() == [785] * 10 + [11] * 30
    assert node.members(0).tolist() == list(range(784)) + [7840]  # weight row 0, then its bias
    assert node.masks().sum(0).eq(1).all()  # every parameter in exactly one block


def test_modulo_random_fully_factorised_and_user():
    mod = modulo_partition(10, 3)
    assert mod.block_ids.tolist() == [0, 1, 2, 0, 1, 2, 0, 1, 2, 0] and mod.sizes().tolist() == [4, 3, 3]
    rnd = random_partition(1000, 7, seed=1)
    assert rnd.num_blocks == 7 and rnd.sizes().min() > 0
    assert torch.equal(rnd.block_ids, random_partition(1000, 7, seed=1).block_ids)
    assert not torch.equal(rnd.block_ids, random_partition(1000, 7, seed=2).block_ids)
    assert random_partition(3, 3, seed=0).sizes().min() > 0  # empty draws are dropped and renumbered
    full = fully_factorised(5)
    assert full.num_blocks == 5 and full.sizes().tolist() == [1] * 5
    user = user_partition([1, 0, 1, 2], 4)
    assert user.members(1).tolist() == [0, 2] and user.layers == ["group_0", "group_1", "group_2"]


def test_linear_without_bias_and_bias_in_last_subblock():
    p = finer_node_partition({"weight": (2, 4)}, beta=2)
    assert [p.members(q).tolist() for q in range(4)] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    q = finer_node_partition({"weight": (1, 4), "bias": (1,)}, beta=2)
    assert [q.members(b).tolist() for b in range(2)] == [[0, 1, 2], [3, 4]]


@pytest.mark.parametrize("call, message", [
    (lambda: layer_partition({"scale": (3,)}), "neither a weight nor a bias"),
    (lambda: layer_partition({"conv.weight": (2, 3, 3)}), "2-D nn.Linear weights"),
    (lambda: layer_partition({"weight": (2, 3), "other.bias": (2,)}), "belong to no linear layer"),
    (lambda: finer_node_partition(MNIST, beta=2, max_block_size=5), "give only one of beta, max_block_size"),
    (lambda: finer_node_partition(MNIST, beta=[2, 1]), "beta has 2 entries, the network has 4 linear layers"),
    (lambda: finer_node_partition(MNIST, subblock_size=[2]), "subblock_size has 1 entries"),
    (lambda: finer_node_partition(MNIST, beta=0), r"beta for layer 'layers.0' must be an integer in \[1, 785\]"),
    (lambda: finer_node_partition(MNIST, beta=[1, 12, 1, 1]), r"'layers.1' must be an integer in \[1, 11\]"),
    (lambda: finer_node_partition(MNIST, beta=1.5), "beta for layer"),
    (lambda: finer_node_partition(MNIST, max_block_size=0), "max_block_size must be an integer >= 1"),
    (lambda: finer_node_partition(MNIST, subblock_size=[0, None, None, None]), "subblock_size for layer 'layers.0'"),
    (lambda: modulo_partition(10, 0), r"num_groups must be an integer in \[1, 10\]"),
    (lambda: random_partition(10, 11), r"num_groups must be an integer in \[1, 10\]"),
    (lambda: user_partition([0, 1], 3), "block_ids has 2 entries, the model has 3 parameters"),
    (lambda: user_partition([0, 2, 2], 3), "must use every id"),
    (lambda: user_partition([-1, 0, 1], 3), "must use every id"),
])
def test_invalid_specs_raise_clear_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
