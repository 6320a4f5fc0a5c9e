"""BlockGibbs / BlockMetropolis (FNBG spec §2, §8): exactness on a conjugate target, the
incremental path against the naive one and the fused path against the eager one, reverted
rejections, adaptation, exact resume."""
import math
import os
import pickle
import warnings

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn

from lit_bayes import Bernoulli, Categorical, Gaussian, GaussianPrior, Posterior
from lit_bayes.posterior import FlatPrior, Prior
import lit_bayes.fused_tail as fused_tail
import lit_bayes.incremental as incremental
from lit_bayes.blocks import modulo_partition
from lit_bayes.callbacks import AcceptanceMonitor, PosteriorSamples, RunHealth
from lit_bayes.data import LinearRegression, NoisyXOR
from lit_bayes.incremental import (BlockPlan, BlockTarget, FullForwardTarget, keep_accepted, rejected_indices,
                                   select_accepted, write_accepted)
from lit_bayes.models import MLP
from lit_bayes.samplers.block_gibbs import BlockGibbs
from lit_bayes.steppers.block_metropolis import BlockMetropolis
from tests.gaussian_targets import assert_matches_gaussian, conjugate_linear_regression


def sampler_and_stepper(**kwargs):
    sampler = BlockGibbs(**kwargs)
    sampler.setup("fit")
    return sampler, sampler.configure_optimizers()


def log_likelihood(sampler, x, y):
    """Per-point log-likelihoods of flat states by a plain forward pass of the sampler's model."""
    return lambda flat: sampler.log_likelihood({}, sampler.outputs(sampler.chains.unflatten(flat), x), y)


def full_forward_energy(sampler, x, y):
    """The reference energy of the sampler's current states, from scratch."""
    target = sampler.block_target(x, y)
    naive = FullForwardTarget(target.plans, target.posterior, target.prior, target.batch_size,
                              log_likelihood(sampler, x, y))
    return naive.reset(sampler.chains.flat())


def sized_batches(sizes, in_dim, classes, seed=0):
    """One batch of random inputs and labels per entry of ``sizes``."""
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(n, in_dim, generator=gen), torch.randint(classes, (n,), generator=gen)) for n in sizes]


def batches(num, size, in_dim, classes, seed=0):
    return sized_batches([size] * num, in_dim, classes, seed)


CASES = {
    "finer_node_categorical": dict(model=MLP([5, 4, 3, 3]), likelihood=Categorical(3), blocks="finer_node",
                                   beta=[2, 2, 1]),
    "node_bernoulli": dict(model=MLP([2, 3, 3, 1]), likelihood=Bernoulli(), blocks="node"),
    "layer_blocks": dict(model=MLP([5, 4, 3, 3]), likelihood=Categorical(3), blocks="layer"),
    "blocks_across_layers": dict(model=MLP([5, 4, 3, 3]), likelihood=Categorical(3), blocks=modulo_partition(51, 7)),
    "sequential_tanh_no_bias": dict(model=nn.Sequential(nn.Linear(5, 4, bias=False), nn.Tanh(), nn.Linear(4, 3)),
                                    likelihood=Categorical(3), blocks="finer_node", max_block_size=2),
}


def run_case(case, sizes=(40,) * 6, **options):
    """Sweeps of CASES[case] with 5 chains on batches of ``sizes``: the sampler, its final states,
    its acceptance counts and the energies after every sweep."""
    spec = dict(CASES[case])
    classes = 2 if isinstance(spec["likelihood"], Bernoulli) else 3
    in_dim = 2 if classes == 2 else 5
    sampler, stepper = sampler_and_stepper(**spec, prior=GaussianPrior(2.0), proposal_variance=0.05, num_chains=5,
                                           seed=4, **options)
    energies = [stepper.step(lambda: sampler.block_target(x, y)) for x, y in sized_batches(sizes, in_dim, classes)]
    return sampler, sampler.chains.flat(), stepper.acceptance()[0], torch.stack(energies)


def assert_same_chains(run, reference):
    """Identical accept/reject decisions and bit-identical states (both accepts and rejects
    happened); energies to float tolerance (the sums differ in rounding)."""
    (_, state, accepted, energy), (_, ref_state, ref_accepted, ref_energy) = run, reference
    assert torch.equal(accepted, ref_accepted) and torch.equal(state, ref_state)
    assert 0 < accepted.sum() < accepted.numel() * 6
    torch.testing.assert_close(energy, ref_energy, rtol=1e-6, atol=1e-4)


@pytest.mark.parametrize("case", sorted(CASES))
def test_incremental_path_matches_full_forward_reference(case):
    """Same seed: the cached-activation path makes the naive path's decisions and states."""
    assert_same_chains(run_case(case, incremental=True), run_case(case, incremental=False))


@pytest.mark.parametrize("blocks_ahead", [1, 3])
@pytest.mark.parametrize("case", ["finer_node_categorical", "sequential_tanh_no_bias"])
def test_input_layer_products_computed_ahead_in_windows_match_the_naive_path(case, blocks_ahead, monkeypatch):
    """The input-layer node blocks' products x[:, S] dw_S, computed ahead for a window of blocks (grouped by
    their columns S), give the naive path's decisions and states whatever the window: one block, or three
    (5 chains x 40 points x 4 bytes each), which splits the groups of the finer-node split across windows."""
    reference = run_case(case, incremental=False)
    monkeypatch.setattr(incremental, "INPUT_PRODUCT_BYTES", blocks_ahead * 5 * 40 * 4)
    assert_same_chains(run_case(case, incremental=True), reference)


@pytest.mark.parametrize("case", ["finer_node_categorical", "node_bernoulli", "sequential_tanh_no_bias"])
def test_fused_tail_matches_the_eager_incremental_path(case, monkeypatch):
    """BlockGibbs(fused=True) (the layers above a node block compiled into one kernel): the same
    decisions and states as the eager incremental path, energies to float tolerance; the 5 chains go
    through in groups of 2, the last one padded."""
    monkeypatch.setattr(fused_tail, "CHAIN_GROUP", 2)
    fused = run_case(case, fused=True)
    assert_same_chains(fused, run_case(case, fused=False))
    tail, layers = fused[0].fused_tail, len(fused[0].stack.layers)
    assert [tail.fuses(j, 5) for j in range(layers)] == [True] * (layers - 1) + [False]  # all but the output layer
    assert {tail.structure(j) for j in range(layers - 1)} <= set(fused_tail._COMPILED)
    copy = pickle.loads(pickle.dumps(fused[0])).fused_tail  # the compiled kernels stay out of the pickle
    assert [copy.structure(j) for j in range(layers - 1)] == [tail.structure(j) for j in range(layers - 1)]


def test_fused_tail_graph_is_reused_for_another_chain_count(monkeypatch, tmp_path):
    """The compiled tails are shared by structure within a process, and the chains go through in groups of
    one static shape (CHAIN_GROUP, here 2, the last group padded): a second one-chain sampler, and a sampler
    with another chain count after one with at least CHAIN_GROUP, trace and compile nothing; another process
    finds the graphs in inductor's cache."""
    from torch._dynamo.utils import counters

    monkeypatch.setattr(fused_tail, "CHAIN_GROUP", 2)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # a fresh cache
    monkeypatch.setattr(fused_tail, "_COMPILED", {})  # a fresh process
    x, y = batches(1, 40, 3, 2)[0]
    graphs, misses = [], []
    for chains in (1, 1, 2, 3):
        sampler, stepper = sampler_and_stepper(model=MLP([3, 2, 2]), likelihood=Categorical(2), blocks="node",
                                               proposal_variance=0.05, num_chains=chains, fused=True)
        sampler.fused_tail.min_terms_one_chain = 0  # this net's one tail has 2 terms: fuse it for one chain too
        stepper.step(lambda: sampler.block_target(x, y))
        graphs.append(counters["stats"]["unique_graphs"])
        misses.append(counters["inductor"]["fxgraph_cache_miss"])
    assert graphs[1] == graphs[0] and misses[1] == misses[0] > 0  # one chain: compiled once, then reused
    assert graphs[2] > graphs[1] and misses[2] > misses[1]  # the graph of a group of two chains
    assert graphs[3] == graphs[2] and misses[3] == misses[2]  # reused at three chains (a full and a padded group)

    monkeypatch.setattr(fused_tail, "_COMPILED", {})  # another process: traces again, compiles nothing
    sampler, stepper = sampler_and_stepper(model=MLP([3, 2, 2]), likelihood=Categorical(2), blocks="node",
                                           proposal_variance=0.05, num_chains=4, fused=True)
    stepper.step(lambda: sampler.block_target(x, y))
    assert counters["stats"]["unique_graphs"] > graphs[3] and counters["inductor"]["fxgraph_cache_miss"] == misses[3]


def test_one_chain_fuses_no_tail_by_default_and_only_wide_ones_when_set():
    """For one chain no tail is fused by default, and with min_terms_one_chain only tails of at least that many
    products (the others stay eager and compile nothing); from CHAIN_GROUP chains on every tail within max_terms
    is, and fewer chains (but one) stay eager."""
    from torch._dynamo.utils import counters

    sampler, stepper = sampler_and_stepper(model=MLP([3, 12, 12, 2]), likelihood=Categorical(2), blocks="node",
                                           num_chains=1, fused=True)
    tail = sampler.fused_tail
    assert [tail.terms(j) for j in range(2)] == [12 + 24, 2]
    assert tail.min_terms_one_chain is None and [tail.fuses(j, 1) for j in range(3)] == [False, False, False]
    assert fused_tail.CHAIN_GROUP == 8 and [tail.fuses(j, 7) for j in range(3)] == [False, False, False]
    assert [tail.fuses(j, 8) for j in range(3)] == [tail.fuses(j, 33) for j in range(3)] == [True, True, False]
    tail.min_terms_one_chain = 36
    assert [tail.fuses(j, 1) for j in range(3)] == [True, False, False]
    with pytest.raises(ValueError, match="min_terms_one_chain"):
        fused_tail.FusedTail(tail.stack, tail.likelihood, min_terms_one_chain=-1)

    tail.min_terms_one_chain = None  # the default: every tail stays eager for one chain
    graphs = counters["stats"]["unique_graphs"]
    x, y = batches(1, 40, 3, 2)[0]
    energy = stepper.step(lambda: sampler.block_target(x, y))
    assert counters["stats"]["unique_graphs"] == graphs and torch.isfinite(energy).all()


def test_fused_tail_follows_a_changing_batch_size(monkeypatch):
    """The compiled tail compiles a graph for each new batch size (static shapes) and keeps making the
    eager path's decisions."""
    monkeypatch.setattr(fused_tail, "CHAIN_GROUP", 2)
    sizes = (40, 30, 40, 25, 50, 17)
    assert_same_chains(run_case("finer_node_categorical", sizes, fused=True),
                       run_case("finer_node_categorical", sizes, fused=False))


@pytest.mark.parametrize("incremental", [True, False])
def test_cached_energy_equals_energy_of_current_state(incremental):
    """Spec §8 item 5's regression test: after every sweep E_cached == E(theta_current)."""
    sampler, stepper = sampler_and_stepper(model=MLP([5, 6, 4, 3]), likelihood=Categorical(3), blocks="finer_node",
                                           beta=2, proposal_variance=0.3, incremental=incremental, num_chains=4)
    for x, y in batches(5, 60, 5, 3, seed=1):
        cached = stepper.step(lambda: sampler.block_target(x, y))
        torch.testing.assert_close(cached, full_forward_energy(sampler, x, y), rtol=1e-6, atol=1e-4)


@pytest.mark.parametrize("incremental", [True, False])
def test_rejected_block_is_reverted_before_the_next_block(incremental):
    """The reference code keeps a rejected block's proposal when evaluating later blocks;
    here a rejection leaves state and energy untouched, and block 1 is then evaluated at
    the current state with block 1 alone replaced."""
    sampler, _ = sampler_and_stepper(model=MLP([3, 4, 2]), likelihood=Categorical(2), blocks="node",
                                     incremental=incremental, num_chains=3)
    (x, y), = batches(1, 30, 3, 2)
    target = sampler.block_target(x, y)
    start = sampler.chains.flat()
    energy = target.reset(start.clone()).clone()
    far = torch.full_like(target.current(0), 50.0)  # a move any chain would reject
    assert (target.propose(0, far) > energy + 100).all()
    target.commit(torch.zeros(3, dtype=torch.bool))
    assert torch.equal(target.state, start) and torch.equal(target.energy, energy)
    values = target.current(1) + 0.1
    expected = start.clone()
    expected[:, target.plans[1].members] = values
    naive = FullForwardTarget(target.plans, target.posterior, target.prior, target.batch_size,
                              log_likelihood(sampler, x, y))
    torch.testing.assert_close(target.propose(1, torch.full_like(values, 0.1)), naive.reset(expected),
                               rtol=1e-6, atol=1e-4)


def test_never_accepted_block_keeps_its_values_over_sweeps():
    sampler, stepper = sampler_and_stepper(model=MLP([2, 3, 1]), likelihood=Bernoulli(), blocks="node",
                                           proposal_variance=[1e6, 0.05, 0.05, 0.05], num_chains=4)
    start = sampler.chains.flat()
    for x, y in batches(10, 50, 2, 2):
        stepper.step(lambda: sampler.block_target(x, y))
    members = sampler.partition.members(0)
    accepted, proposed = stepper.acceptance()
    assert accepted[:, 0].sum() == 0 and accepted[:, 1:].sum() > 0 and proposed == 10
    assert torch.equal(sampler.chains.flat()[:, members], start[:, members])


class _FixedEnergies(BlockTarget):
    """A toy target: every chain's current summed log-likelihood is ``now`` and every proposal's ``proposed``
    (their likelihood energies are their negatives: scaling "sum", T = 1)."""

    now = [0.0, 0.0, 0.0, 0.0, math.nan, math.nan]
    proposed = [math.nan, math.inf, -math.inf, 1e9, 1e9, math.nan]

    def _reset_likelihood(self, state):
        return torch.tensor(self.now, dtype=torch.float64)

    def _propose_likelihood(self, plan, values, delta):
        return torch.tensor(self.proposed, dtype=torch.float64)

    def _commit_likelihood(self, accept, rejected):
        pass


def test_nan_or_infinite_proposal_is_a_rejection_and_a_nan_state_moves():
    """Chains 0-2 propose NaN, -inf and +inf energies: rejected; chain 3 a better finite one: accepted;
    chain 4 is at a NaN energy and moves to its finite proposal; chain 5 (NaN to NaN) stays. Adapting,
    the rejections count as acceptance probability 0 (no NaN in the variances)."""
    theta = torch.zeros(6, 2)
    stepper = BlockMetropolis([theta], variances=[0.1, 0.1], adapt_steps=1, generator=torch.Generator().manual_seed(0))
    plans = [BlockPlan(torch.tensor([0]), 0), BlockPlan(torch.tensor([1]), 0)]
    prior = GaussianPrior(1.0)
    posterior = Posterior(Gaussian(), prior, minibatch_scaling="sum")
    stepper.step(lambda: _FixedEnergies(plans, posterior, prior.flat({"theta": (2,)}), 1))
    accepted, _ = stepper.acceptance()
    assert accepted.tolist() == [[0, 0], [0, 0], [0, 0], [1, 1], [1, 1], [0, 0]]
    assert (theta[[0, 1, 2, 5]] == 0).all() and (theta[[3, 4]] != 0).all()
    variances = stepper.proposal_variances()
    assert torch.isfinite(variances).all()
    assert (variances[[0, 1, 2, 5]] < 0.1).all() and (variances[[3, 4]] > 0.1).all()


def test_adaptation_moves_variances_during_burn_in_then_freezes():
    def run(sweeps):
        sampler, stepper = sampler_and_stepper(model=MLP([2, 3, 1]), likelihood=Bernoulli(), blocks="node",
                                               proposal_variance=[100.0, 100.0, 100.0, 1e-6], adapt=True, burn_in=30,
                                               target_accept=0.3, num_chains=3)
        for x, y in batches(sweeps, 50, 2, 2):
            stepper.step(lambda: sampler.block_target(x, y))
        return stepper.proposal_variances().clone()

    after_burn_in, later = run(31), run(40)
    assert torch.equal(after_burn_in, later)  # frozen after the burn-in sweeps
    assert (later[:, :3] < 100.0).all() and (later[:, 3] > 1e-6).all()  # too large shrinks, too small grows


def test_per_layer_and_per_block_variances():
    per_layer = BlockGibbs(MLP([2, 3, 1]), Bernoulli(), blocks="node", proposal_variance=[0.1, 0.2])
    assert per_layer.stepper_options["variances"] == [0.1, 0.1, 0.1, 0.2]
    per_block = BlockGibbs(MLP([2, 3, 1]), Bernoulli(), blocks="node", proposal_variance=[0.1, 0.2, 0.3, 0.4])
    assert per_block.stepper_options["variances"] == [0.1, 0.2, 0.3, 0.4]


@pytest.mark.parametrize("kwargs, message", [
    (dict(blocks="rows"), "blocks must be one of layer, node, finer_node"),
    (dict(blocks="node", beta=2), "beta only apply to blocks='finer_node'"),
    (dict(proposal_variance=[0.1, 0.2, 0.3]),
     r"one per layer \(2: \['net.layers.0', 'net.layers.1'\]\) or one per block \(4\)"),
    (dict(proposal_variance=-1.0), r"variances\[0\] must be a finite number > 0, got -1.0"),
    (dict(target_accept=1.5), r"target_accept must be a number in \(0, 1\)"),
    (dict(adapt="yes"), "adapt must be True or False"),
    (dict(likelihood=Gaussian(1.0, learn_noise=True)), "likelihood Gaussian has parameters"),
    (dict(blocks=modulo_partition(10, 2)), "blocks partitions 10 parameters, the model has 13"),
    (dict(model=nn.Sequential(nn.Linear(2, 3), nn.Dropout(), nn.Linear(3, 1))), "pass incremental=False"),
    (dict(fused=True, incremental=False), "fused must be True or False and needs incremental=True"),
    (dict(fused="yes"), "fused must be True or False"),
])
def test_invalid_arguments_raise_clear_errors(kwargs, message):
    spec = dict(model=MLP([2, 3, 1]), likelihood=Bernoulli(), blocks="node")
    with pytest.raises(ValueError, match=message):
        BlockGibbs(**{**spec, **kwargs})


def trainer(steps, callbacks, root, **kwargs):
    return L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, limit_val_batches=0, callbacks=callbacks, default_root_dir=root,
                     **kwargs)


@pytest.mark.parametrize("blocks", ["finer_node", "layer"])
def test_full_batch_samples_conjugate_linear_regression(blocks, tmp_path):
    """Full batch, so MH-within-Gibbs is exact: mean and covariance of the kept draws match
    the closed-form posterior within ESS-derived tolerances; adapted variances, frozen after
    the burn-in, give acceptance near the target; AcceptanceMonitor reads the counts."""
    data = LinearRegression(num_train=50, num_val=10, num_test=10, batch_size=None, seed=1)
    sampler = BlockGibbs(nn.Linear(3, 1), Gaussian(1.0), GaussianPrior(1.0), blocks=blocks,
                         beta=2 if blocks == "finer_node" else None, proposal_variance=1.0, adapt=True,
                         target_accept=0.35, num_chains=8, burn_in=300, seed=2)
    store, monitor = PosteriorSamples(max_draws=2_000), AcceptanceMonitor()
    trainer(1_800, [store, monitor], tmp_path).fit(sampler, datamodule=data)
    x, y = data.train_data.tensors
    mean, cov = conjugate_linear_regression(x, y, noise_var=1.0, prior_var=1.0)
    assert_matches_gaussian(store.trace(), mean, cov)
    rates = monitor.rates()
    assert set(rates["layer"]) == {"net"} and len(rates["block"]) == sampler.partition.num_blocks
    assert 0.2 < monitor.summary_metrics()["accept/overall"] < 0.5, rates


@pytest.mark.parametrize("batch_size, scaling, noted",
                         [(10, "sum", True), (None, "sum", False), (10, "rescaled", False)])
def test_a_batch_sized_target_is_warned_and_kept_in_the_health_notes(batch_size, scaling, noted, tmp_path):
    """minibatch_scaling='sum' on batches of 10 of 40 points samples a posterior of 10 points' worth of data:
    said at fit start and in the run's health notes; full batches, or the rescaled energy, say nothing."""
    data = NoisyXOR(num_train=40, num_val=0, num_test=8, batch_size=batch_size, seed=3)
    sampler = BlockGibbs(MLP([2, 3, 1]), Bernoulli(), GaussianPrior(10.0), minibatch_scaling=scaling, num_chains=2,
                         burn_in=4, seed=5)
    health = RunHealth(print_report=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer(12, [PosteriorSamples(), health], tmp_path).fit(sampler, datamodule=data)
    said = [str(w.message) for w in caught if "minibatch_scaling='sum'" in str(w.message)]
    notes = health.assess_fit(None, None).notes
    if noted:
        assert len(said) == 1 and "batches of 10 of the 40 training points" in said[0]
        assert "changes with the batch size" in said[0] and notes == said
    else:
        assert said == [] and notes == []


def fit_xor(root, epochs, ckpt_path=None):
    torch.set_num_threads(1)
    data = NoisyXOR(num_train=40, num_val=0, num_test=8, batch_size=10, seed=3)
    sampler = BlockGibbs(MLP([2, 3, 1]), Bernoulli(), GaussianPrior(10.0), blocks="finer_node", beta=[2, 1],
                         proposal_variance=[0.2, 0.05], adapt=True, num_chains=3, burn_in=16, seed=5)
    samples, monitor = PosteriorSamples(max_draws=100), AcceptanceMonitor()
    checkpoint = ModelCheckpoint(dirpath=os.path.join(root, "ckpt"), save_last=True, save_on_train_epoch_end=True,
                                 every_n_epochs=1)
    L.Trainer(max_epochs=epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
              limit_val_batches=0, callbacks=[samples, monitor, checkpoint], default_root_dir=root,
              ).fit(sampler, datamodule=data, ckpt_path=ckpt_path)
    return sampler, samples, monitor


def test_resumed_chain_equals_uninterrupted_chain(tmp_path):
    """24 sweeps == 12 sweeps + checkpoint + 12 (adaptation runs until sweep 16, across the
    checkpoint): states, kept draws, adapted variances and per-block counts bit for bit; the
    acceptance rates also survive a restore that runs no sweep."""
    full, full_samples, full_monitor = fit_xor(str(tmp_path / "full"), 6)
    fit_xor(str(tmp_path / "split"), 3)
    resumed, resumed_samples, resumed_monitor = fit_xor(str(tmp_path / "split"), 6,
                                                        ckpt_path=str(tmp_path / "split" / "ckpt" / "last.ckpt"))
    assert full.global_step == resumed.global_step == 24
    assert torch.equal(full.chains.flat(), resumed.chains.flat())
    assert torch.equal(full_samples.trace(), resumed_samples.trace())
    assert torch.equal(full.proposal_variances(), resumed.proposal_variances())
    assert full.proposal_variances().ne(torch.tensor([0.2] * 6 + [0.05])).any()  # adaptation did act
    counts, resumed_counts = full.acceptance_counts(), resumed.acceptance_counts()
    assert torch.equal(counts["accepted"], resumed_counts["accepted"]) and counts["proposed"] == 24
    assert full_monitor.rates() == resumed_monitor.rates()
    assert set(full_monitor.rates()["layer"]) == {"net.layers.0", "net.layers.1"}
    assert len(full_monitor.rates()["node"]) == 4
    # restored at its end, no sweep runs: the rates still come back from the checkpoint
    finished, _, finished_monitor = fit_xor(str(tmp_path / "split"), 6,
                                            ckpt_path=str(tmp_path / "split" / "ckpt" / "last.ckpt"))
    assert finished.global_step == 24
    assert finished_monitor.summary_metrics() == full_monitor.summary_metrics() != {}


def _naive_single_site_sweeps(widths, flat, prior_var, proposal_var, generator, data):
    """Single-site Metropolis-within-Gibbs written from scratch: a Python loop over every
    scalar parameter (layer, node, its incoming weights in input order, then its bias), each
    chain in turn, with its own float64 log-target (raw batch sum, sigmoid MLP, softmax
    output, N(0, prior_var) prior). Draws as the stepper makes them: per sweep first one
    uniform per chain and coordinate, then one normal per chain and coordinate, in one
    (chains, coordinates) draw in visiting order."""
    theta = flat.clone()
    chains, num_params = theta.shape
    offsets, start = [], 0  # flat layout: layers.0.weight, layers.0.bias, layers.1.weight, ...
    for a, b in zip(widths[:-1], widths[1:]):
        offsets.append((start, start + a * b, a, b))
        start += a * b + b
    order = []  # the coordinates in visiting order
    for w, bias, a, b in offsets:
        for k in range(b):
            order += [w + k * a + i for i in range(a)] + [bias + k]
    assert sorted(order) == list(range(num_params))

    def energy(vec, x, y):
        h = x.double()
        for j, (w, bias, a, b) in enumerate(offsets):
            weight, b_vec = vec[w : w + a * b].double().reshape(b, a), vec[bias : bias + b].double()
            h = h @ weight.T + b_vec
            if j < len(offsets) - 1:
                h = torch.sigmoid(h)
        log_lik = torch.log_softmax(h, dim=1)[torch.arange(len(y)), y].sum()
        return float(-log_lik + (vec.double() ** 2).sum() / (2 * prior_var))

    accepted = torch.zeros(chains, num_params)
    std = torch.tensor(proposal_var, dtype=theta.dtype).sqrt()
    for x, y in data:
        log_u = torch.rand((chains, num_params), generator=generator).log()
        noise = torch.randn((chains, num_params), generator=generator)
        for q, i in enumerate(order):
            for c in range(chains):
                proposal = theta[c].clone()
                proposal[i] = theta[c, i] + std * noise[c, q]
                if float(log_u[c, q]) < energy(theta[c], x, y) - energy(proposal, x, y):
                    theta[c] = proposal
                    accepted[c, q] += 1
    return theta, accepted


@pytest.mark.parametrize("incremental", [True, False])
def test_singleton_blocks_equal_naive_single_site_metropolis(incremental):
    """With every block a single parameter (finer_node, max_block_size=1), BlockGibbs is
    single-site Metropolis-within-Gibbs. Compared: started from the same states with a copy
    of the sampler's generator (so both consume the same uniforms and normals in the same
    order), the naive loop above and BlockGibbs make the same accept/reject decision for
    every chain, coordinate and sweep (the per-coordinate acceptance counts match), and end
    in the same states (to float32 rounding of the proposal arithmetic, which is the same
    expression in both)."""
    torch.manual_seed(0)
    widths = [3, 3, 2]
    sampler, stepper = sampler_and_stepper(model=MLP(widths), likelihood=Categorical(2), prior=GaussianPrior(2.0),
                                           blocks="finer_node", max_block_size=1, proposal_variance=0.3,
                                           incremental=incremental, num_chains=3, seed=7)
    assert sampler.partition.num_blocks == sampler.partition.num_params == 20
    start = sampler.chains.flat().clone()
    generator = torch.Generator()
    generator.set_state(stepper.generator.get_state())
    data = batches(4, 25, 3, 2, seed=3)
    for x, y in data:
        stepper.step(lambda: sampler.block_target(x, y))
    naive_state, naive_accepted = _naive_single_site_sweeps(widths, start, 2.0, 0.3, generator, data)
    accepted, proposed = stepper.acceptance()
    assert proposed == 4
    assert torch.equal(accepted, naive_accepted)
    assert 0 < accepted.sum() < accepted.numel() * 4  # both accepts and rejects happened
    torch.testing.assert_close(sampler.chains.flat(), naive_state, rtol=0, atol=0)


def test_mnist_fnbg_recipe_runs_end_to_end_on_tiny_idx_files(tmp_path):
    """recipes/fnbg/mnist_fnbg.yaml through the CLI at a tiny size, on MNIST idx files written
    here in the on-disk format (24 train, 12 test images of random pixels): summary.json
    holds the test accuracy and the per-layer acceptance rates."""
    import json
    from pathlib import Path

    from lit_bayes.cli import main
    from tests.test_data import write_mnist

    torch.set_num_threads(1)
    write_mnist(tmp_path / "data", "MNIST")
    recipe = Path(__file__).resolve().parents[1] / "recipes" / "fnbg" / "mnist_fnbg.yaml"
    main(["fit", "-c", str(recipe), "--trainer.default_root_dir", str(tmp_path / "runs"), "--wandb", "false",
          "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "3", "--trainer.enable_progress_bar", "false",
          "--model.init_args.burn_in", "1", "--data.init_args.root", str(tmp_path / "data"),
          "--data.init_args.batch_size", "8", "--data.init_args.eval_batch_size", "12"])
    (summary_file,) = (tmp_path / "runs").rglob("summary.json")
    summary = json.loads(summary_file.read_text())
    metrics = summary["metrics"]
    assert summary["steps"] == 3
    assert 0.0 <= metrics["test/accuracy"] <= 1.0
    layers = {k for k in metrics if k.startswith("accept/layer_")}
    assert layers == {f"accept/layer_net.layers.{j}" for j in range(4)}, sorted(metrics)
    assert all(0.0 <= metrics[k] <= 1.0 for k in layers)


def test_keep_accepted_index_and_where_paths_equal_where():
    """The commit's ways of keeping accepted chains (rows of rejected chains copied on CPU, one ``where``
    on CUDA; in place for a cache row; per-chain energies) all equal ``torch.where`` over the chain
    dimension, also when every chain accepts or every chain rejects (where the CPU path skips the work),
    and for one chain, whose rejected indices are found without a search (``rejected_indices``)."""
    gen = torch.Generator().manual_seed(0)
    for accept in ([True, False, True, True, False, False], [True] * 6, [False] * 6, [True], [False]):
        accept = torch.tensor(accept)
        old, new = torch.randn(len(accept), 3, 4, generator=gen), torch.randn(len(accept), 3, 4, generator=gen)
        expected = torch.where(accept[:, None, None], new, old)
        rejected = rejected_indices(accept)
        assert torch.equal(rejected, (~accept).nonzero().squeeze(1))
        assert torch.equal(keep_accepted(new.clone(), old, accept, None), expected)
        assert torch.equal(keep_accepted(new.clone(), old, accept, rejected), expected)
        for known in (None, rejected):  # the in-place row update and the per-chain selection of the energies
            target = old.clone()
            write_accepted(target, new, accept, known)
            assert torch.equal(target, expected)
            assert torch.equal(select_accepted(new[:, 0, 0], old[:, 0, 0], accept, known), expected[:, 0, 0])


def test_gaussian_flat_prior_equals_the_generic_flat_prior():
    """GaussianPrior.flat's table form (log density and the change of a block) equals FlatPrior's sums of the
    prior's own per-element densities, with a group variance."""
    prior = GaussianPrior(2.0, group_variances={"b*": 0.5})
    shapes = {"w": (3, 2), "b": (3,)}
    gaussian, generic = prior.flat(shapes), FlatPrior(prior, shapes)
    gen = torch.Generator().manual_seed(0)
    state, step = torch.randn(4, 9, generator=gen), torch.randn(4, 3, generator=gen)
    torch.testing.assert_close(gaussian.log_density(state), generic.log_density(state))
    members = torch.tensor([1, 5, 7])
    torch.testing.assert_close(gaussian.change(members, state[:, members], step),
                               generic.change(members, state[:, members], step))


def test_prior_changes_of_all_blocks_equal_each_blocks_change():
    """GaussianFlatPrior.changes (every block's prior change at a sweep's start, in one pass over the positions)
    equals each block's own change, for blocks of several sizes across parameters with two variances (FlatPrior's
    generic changes stacks each block's change; a non-Gaussian prior samples through it in
    test_non_gaussian_prior_samples_its_posterior)."""
    shapes = {"w": (3, 2), "b": (3,)}
    members = [torch.tensor([4, 1]), torch.tensor([0]), torch.tensor([8, 2, 5, 6]), torch.tensor([3, 7])]
    gen = torch.Generator().manual_seed(1)
    state = torch.randn(4, 9, generator=gen)
    steps = [torch.randn(4, m.numel(), generator=gen) for m in members]
    flat = GaussianPrior(2.0, group_variances={"b*": 0.5}).flat(shapes)
    each = torch.stack([flat.change(m, state[:, m], s) for m, s in zip(members, steps)], 1)
    torch.testing.assert_close(flat.changes(members, state, steps), each, rtol=1e-12, atol=1e-12)


class LaplacePrior(Prior):
    """A non-Gaussian prior with a per-element log density: Laplace(0, scale) on every parameter."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def log_density(self, values, name):
        return -values.abs() / self.scale - math.log(2 * self.scale)

    def sample(self, params, generator=None):
        return {name: torch.distributions.Laplace(0.0, self.scale).sample(p.shape).to(p.dtype)
                for name, p in params.items()}


@pytest.mark.parametrize("blocks, size", [("layer", None), ("finer_node", 1)])
def test_non_gaussian_prior_samples_its_posterior(blocks, size):
    """Any factorised prior works through the energy layer: a Laplace(0, 0.3) prior on the weight
    and bias of y = w x + b + N(0, 1) noise, with the pair in one block ("layer") and in one block
    each (single-site), matches the posterior's mean and covariance by quadrature on a grid."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(6, 1, generator=gen)
    y = 0.8 * x[:, 0] - 0.2 + torch.randn(6, generator=gen)
    prior = LaplacePrior(0.3)
    sampler, stepper = sampler_and_stepper(model=nn.Linear(1, 1), likelihood=Gaussian(1.0), prior=prior,
                                           blocks=blocks, max_block_size=size, proposal_variance=0.3, num_chains=64,
                                           seed=3)
    draws = []
    for sweep in range(1_200):
        stepper.step(lambda: sampler.block_target(x, y))
        if sweep >= 200:
            draws.append(sampler.chains.flat().clone())
    trace = torch.stack(draws, 1)  # (chains, draws, [w, b])
    grid = torch.linspace(-3, 3, 601, dtype=torch.float64)
    w, b = torch.meshgrid(grid, grid, indexing="ij")
    residual = y.double()[:, None, None] - w * x.double()[:, 0, None, None] - b
    log_post = -0.5 * residual.square().sum(0) + prior.log_density(w, "w") + prior.log_density(b, "b")
    weights = (log_post - log_post.max()).exp()
    weights = weights / weights.sum()
    points = torch.stack([w.flatten(), b.flatten()], 1)
    mean = (weights.flatten()[:, None] * points).sum(0)
    centred = points - mean
    cov = (weights.flatten()[:, None, None] * centred[:, :, None] * centred[:, None, :]).sum(0)
    assert_matches_gaussian(trace, mean, cov)
