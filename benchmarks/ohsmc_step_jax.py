"""Reference for benchmarks/ohsmc_step.py: one OHSMC step on the two-moons pBNN in JAX, the whole step jitted.

Written for this benchmark from the Feynman-Kac spec (§3, Algorithm 3 in the authors' order: move,
whole-batch log-likelihood added to the log-weights, logsumexp normalisation, stratified resampling, the
psi-gradient re-evaluated on the resampled particles with uniform weights, one Adam step at lr 0.01;
§1 the network Dense100-GELU -> Dense20-GELU -> Dense5-GELU (stochastic) -> Dense1, tanh GELU,
Bernoulli likelihood; batch 20, random walk of variance 0.01), float64. It is not the authors' code:
one ``jax.jit`` of the whole step, as tight as JAX makes it, so that the comparison is against JAX
itself rather than against one implementation's overheads.

Needs ``jax`` and ``optax`` (not dependencies of lit_bayes). Prints ``jax_ms <median ms per step>``.
Run one-threaded, as ohsmc_step.py does when given ``--jax-python``:
  XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" python ohsmc_step_jax.py --particles 100
"""
from __future__ import annotations

import argparse
import math
import statistics
import time

import jax
import jax.numpy as jnp
import optax

jax.config.update("jax_enable_x64", True)

BATCH, NUM_DATA, WIDTHS = 20, 100, (2, 100, 20, 5, 1)


def gelu(a):
    return jax.nn.gelu(a, approximate=True)


def log_likelihoods(psi, phi, x, y):
    """sum_b log p(y_b | x_b, phi^j; psi) for every particle j, (J,)."""
    h = gelu(gelu(x @ psi["w0"] + psi["b0"]) @ psi["w1"] + psi["b1"])

    def one(weight, bias):
        f = (gelu(h @ weight + bias) @ psi["w3"] + psi["b3"])[:, 0]
        return jnp.sum(y * jax.nn.log_sigmoid(f) + (1.0 - y) * jax.nn.log_sigmoid(-f))

    return jax.vmap(one)(phi["w"], phi["b"])


def make_step(num_particles: int, optimizer):
    @jax.jit
    def step(psi, opt_state, phi, log_w, key, x, y):
        k_weight, k_bias, k_resample = jax.random.split(key, 3)
        phi = {"w": phi["w"] + 0.1 * jax.random.normal(k_weight, phi["w"].shape, jnp.float64),
               "b": phi["b"] + 0.1 * jax.random.normal(k_bias, phi["b"].shape, jnp.float64)}
        log_w = log_w + log_likelihoods(psi, phi, x, y)
        log_w = log_w - jax.scipy.special.logsumexp(log_w)
        u = (jnp.arange(num_particles) + jax.random.uniform(k_resample, (num_particles,), jnp.float64)) / num_particles
        index = jnp.clip(jnp.searchsorted(jnp.cumsum(jnp.exp(log_w)), u), 0, num_particles - 1)
        phi = {"w": phi["w"][index], "b": phi["b"][index]}
        grads = jax.grad(lambda p: -(NUM_DATA / BATCH) * jnp.mean(log_likelihoods(p, phi, x, y)))(psi)
        updates, opt_state = optimizer.update(grads, opt_state)
        uniform = jnp.full((num_particles,), -math.log(num_particles), jnp.float64)
        return optax.apply_updates(psi, updates), opt_state, phi, uniform

    return step


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--particles", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args(argv)
    keys = jax.random.split(jax.random.PRNGKey(0), 8 + args.warmup + args.repeats)
    psi = {}
    for i, (a, b) in enumerate(zip(WIDTHS[:-1], WIDTHS[1:])):
        if i != 2:  # xavier-normal weights, zero biases
            psi[f"w{i}"] = jax.random.normal(keys[i], (a, b), jnp.float64) * math.sqrt(2.0 / (a + b))
            psi[f"b{i}"] = jnp.zeros(b, jnp.float64)
    num = args.particles
    phi = {"w": jax.random.normal(keys[4], (num, 20, 5), jnp.float64),
           "b": jax.random.normal(keys[5], (num, 5), jnp.float64)}
    x = jax.random.normal(keys[6], (BATCH, 2), jnp.float64)
    y = (jax.random.uniform(keys[7], (BATCH,)) < 0.5).astype(jnp.float64)
    optimizer = optax.adam(0.01)
    step = make_step(num, optimizer)
    state = (psi, optimizer.init(psi), phi, jnp.full((num,), -math.log(num), jnp.float64))
    times = []
    for i, key in enumerate(keys[8:]):
        start = time.perf_counter()
        state = jax.block_until_ready(step(*state, key, x, y))
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    print(f"jax_ms {1e3 * statistics.median(times):.4f}")


if __name__ == "__main__":
    main()
