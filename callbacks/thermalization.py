"""``ThermalizationCheck``: the teacher-student thermalization test of "Gibbs Sampling the Posterior of
Neural Networks" (Piccioli, Troiani, Zdeborová; noisy-gibbs spec §4, Sec. I.1 and App. B).

The teacher W* with its latents is an exact draw of the posterior (spec §4, "why it works"), so a
chain started there is at equilibrium. Running it beside uninformed chains on the same data, the
time at which the uninformed chains' test MSE against the teacher merges with the informed chain's
is a lower bound on their thermalization time. R-hat (App. A) and the score (App. B.3) are computed
on the same chains for comparison; the paper's Fig. 1 shows both can signal thermalization where
the teacher-student test does not. The informed chain can also be read from an earlier run on the
same teacher and data instead of run again (``informed_run``), which halves the cost of a long
single uninformed chain.

The callback only observes: the informed start is the sampler's configuration (``informed_chains``
of :class:`lit_bayes.samplers.noisy_gibbs.NoisyGibbs` and
:class:`lit_bayes.samplers.noisy_hmc.IntermediateHMC`, and of the classical
:class:`lit_bayes.samplers.hmc.HMC` / ``MALA``, which read the teacher from the DataModule),
and the results reach ``summary.json`` through :meth:`ThermalizationCheck.summary_metrics`
(:class:`lit_bayes.callbacks.run_summary.RunSummary`), with the records themselves
(:meth:`ThermalizationCheck.summary_section`) when ``summary_records`` is set. Records are taken every
``every_n_steps`` steps or, with ``every_n_seconds``, at evenly spaced wall-clock times (the paper's
Exp. B: runs of a fixed time budget, the Trainer's ``max_time``).
"""
from __future__ import annotations

import math
import time
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor

from lit_bayes.data.teacher_student import check_student, teacher_of
from lit_bayes.diagnostics import split_rhat
from lit_bayes.noisy_energy import JointDensity
from lit_bayes.validation import check_bool, check_int, check_interval

__all__ = ["RHAT_COLUMNS", "RHAT_PERCENTILES", "RHAT_SETS", "ThermalizationCheck", "merge_band", "merge_indices",
           "rhat_columns", "settled_index", "trailing_mean"]

PREFIX = "thermalization/"
RHAT_PERCENTILES = (25, 50, 75, 95)  # of the per-test-point R-hat, as the paper's Fig. 4 shows them (App. A)
RHAT_SETS = ("rhat", "rhat_uninformed")  # R-hat over all chains, over the uninformed chains
RHAT_COLUMNS = 1 + len(RHAT_SETS) * (1 + len(RHAT_PERCENTILES))  # an R-hat row: step, means, percentiles


def rhat_columns(name: str) -> list[int]:
    """The columns of an R-hat row (:meth:`ThermalizationCheck.traces`) holding ``name``'s (one of
    ``RHAT_SETS``) mean R-hat and then its ``RHAT_PERCENTILES``."""
    i = RHAT_SETS.index(name)
    first = 1 + len(RHAT_SETS) + i * len(RHAT_PERCENTILES)
    return [1 + i, *range(first, first + len(RHAT_PERCENTILES))]


def _no_rhat() -> Tensor:
    """The mean and percentiles of an R-hat that is not defined: NaN."""
    return torch.full((1 + len(RHAT_PERCENTILES),), math.nan, dtype=torch.float64)


def settled_index(inside: Tensor, delta: float) -> int | None:
    """The first index k of the boolean sequence ``inside`` from which at most a fraction ``delta`` of the
    entries k, k+1, ... are False (spec §4: "up to a fraction delta of draws"); None if there is none."""
    outside = torch.flip(torch.cumsum(torch.flip((~inside).double(), [0]), 0), [0])  # False entries from k on
    remaining = torch.arange(len(inside), 0, -1, dtype=torch.float64)
    found = (outside <= delta * remaining).nonzero().flatten()
    return int(found[0]) if found.numel() else None


def trailing_mean(trace: Tensor, window: int) -> Tensor:
    """Mean over the last ``window`` records (fewer at the start) of each row of ``trace`` ``(C, R)``."""
    total = torch.nn.functional.pad(trace.cumsum(1), (1, 0))
    upper = torch.arange(1, trace.shape[1] + 1)
    lower = (upper - window).clamp(min=0)
    return (total[:, upper] - total[:, lower]) / (upper - lower)


def merge_band(informed_mse: Tensor, window: int, delta: float = 0.1, tolerance: float = 0.2,
               reference_fraction: float = 0.5) -> tuple[float, float, float]:
    """phi-bar and the band ``(low, high)`` estimating S_phi(delta) from the informed chains' test-MSE records
    ``(I, R)`` (the merge rule of :class:`ThermalizationCheck`): the last ``reference_fraction`` of the
    records are taken as stationary; phi-bar is their mean, and the band runs from ``min(q_{delta/2},
    (1 - tolerance) phi-bar)`` to ``max(q_{1-delta/2}, (1 + tolerance) phi-bar)``, q the quantiles of
    their trailing means over ``window`` records."""
    records = informed_mse.shape[1]
    start = min(int(records * (1 - reference_fraction)), records - 1)
    informed = trailing_mean(informed_mse, window)[:, start:].flatten()
    reference = float(informed_mse[:, start:].mean())
    quantiles = torch.quantile(informed, torch.tensor([delta / 2, 1 - delta / 2], dtype=informed.dtype))
    return reference, min(float(quantiles[0]), (1 - tolerance) * reference), \
        max(float(quantiles[1]), (1 + tolerance) * reference)


def merge_indices(mse: Tensor, low: float, high: float, window: int, delta: float = 0.1) -> list[int | None]:
    """For each chain's test-MSE records (rows of ``mse`` ``(C, R)``), the first record from which its trailing
    mean over ``window`` records stays in ``[low, high]`` up to a fraction ``delta`` (None: never)."""
    smooth = trailing_mean(mse, window)
    return [settled_index((row >= low) & (row <= high), delta) for row in smooth]


class ThermalizationCheck(Callback):
    """Informed vs uninformed chains of a :class:`lit_bayes.samplers.noisy_gibbs.NoisyGibbs` (or
    :class:`lit_bayes.samplers.noisy_hmc.IntermediateHMC`, or the classical :class:`lit_bayes.samplers.hmc.HMC`
    and ``MALA``) run on a teacher-student DataModule (:class:`lit_bayes.data.teacher_student.TeacherStudent`),
    spec §4.

    The sampler starts its first ``informed_chains`` chains at the teacher (its own ``informed_chains``
    option: the teacher's weights and biases and its training latents, with the noise actually used for
    the labels, spec §4 step 4, §8 item 5); the other chains keep the sampler's ``init`` (zeros, prior,
    ...): they are the uninformed chains. At ``setup`` this callback checks that the sampler's
    ``informed_chains`` equals its own and that ``num_chains > informed_chains``; it changes nothing.

    **Reading the informed chain** (spec §4: "runs (or reads)"). With ``informed_run``, the path of a
    checkpoint of an earlier run with this callback on the same teacher and data (checked: its
    recorded teacher test outputs and a summary of its training set must equal this run's), no chain
    is started at the teacher: every chain of the sampler is uninformed, and the merge rule below
    takes that run's informed test-MSE records as the reference. Its records are copied into this
    callback's state, so a resumed run or a report from a checkpoint does not need the file again.
    R-hat between informed and uninformed chains needs their outputs side by side and is NaN then
    (``rhat``, ``rhat_step``); the uninformed chains' own R-hat is computed as usual. The sampler's
    ``informed_chains`` must then be 0.

    Every ``every_n_steps`` sweeps (and at step 0, before the first sweep) it records for each chain (with
    ``every_n_seconds`` instead: at the first step end after each multiple of it, measured from the start of
    training, and at the end of training; every record notes its time):

    - the test MSE against the teacher's noiseless test outputs, (1/n_test) sum_mu (f(x_mu, W*) - f(x_mu, W))^2
      (spec §3, §4 "observable used throughout");
    - the score statistic U = Delta_Z / (d_1 d_2) sum_{i,a} d log P / d W^(1)_{ai} of the sampler's joint
      (spec §4, App. B.3; :meth:`lit_bayes.noisy_energy.JointDensity.score`; NaN for a sampler of the
      classical posterior, which keeps no latents: ``score_step`` is then NaN);
    - the noiseless outputs at the first ``rhat_points`` test points (psi of App. A, permutation
      invariant, spec §8 item 7), for R-hat over blocks of ``rhat_block`` records (the paper: 50).

    **Merge rule** (spec §4 steps 5-6 with the definitions of Sec. I.1; the paper merges by eye, the
    numbers are ours). Every chain's test MSE is smoothed by a trailing mean over ``window`` records.
    The informed chain starts at MSE 0 and must first become stationary (App. B.1): its reference
    records are the last ``reference_fraction`` of them (of its own run's, when read), with mean
    phi-bar. The stationary set S_phi(delta) is estimated as the band from
    ``min(q_{delta/2}, (1 - tolerance) phi-bar)`` to ``max(q_{1-delta/2}, (1 + tolerance) phi-bar)``,
    q the quantiles of the informed reference records: the informed chain's own central 1 - delta
    range, or within ``tolerance`` of phi-bar, whichever is wider. An uninformed chain has merged at
    the first recorded step after which its smoothed MSE lies in that band up to a fraction ``delta``
    of the records. The run's merge step is the largest over the
    uninformed chains; it is reported only when every uninformed chain has merged.

    **Comparison criteria.** ``rhat_step``: the end of the first R-hat block from which the split R-hat
    (:func:`lit_bayes.diagnostics.split_rhat`, averaged over the test points) of all chains stays
    below ``rhat_threshold`` (up to a fraction ``delta`` of the blocks); ``rhat_uninformed_step`` the same over the uninformed chains only (with
    at least two of them, the paper's random-random pair, Fig. 1 right). ``score_step``: the first
    recorded step at which every uninformed chain's score has changed sign at least once (it then
    oscillates around 0, App. B.3).

    :meth:`summary_metrics` (written into ``summary.json`` by :class:`RunSummary`) returns, under
    ``thermalization/``: ``informed_test_mse`` (phi-bar), ``uninformed_test_mse`` (mean over the
    uninformed chains of their last smoothed value), ``band_low`` and ``band_high`` (the estimated
    S_phi(delta)), ``merged`` (1 or 0), ``merged_fraction``, ``merge_step`` (NaN when not
    merged; ``merge_step/chain_{c}`` per uninformed chain), ``rhat``, ``rhat_step``,
    ``rhat_uninformed``, ``rhat_uninformed_step``, the last block's percentiles (``rhat_p25`` ...
    ``rhat_uninformed_p95``), ``score_step`` (NaN when not reached) and
    ``records``. During fit it logs the traces, ``thermalization/test_mse/chain_{c}`` and
    ``thermalization/score/chain_{c}`` at every record and ``thermalization/rhat`` and
    ``thermalization/rhat_uninformed`` at every block where they are defined (two chains or more, the
    informed chains' outputs at hand, a varying output), with the 25/50/75/95th percentiles of the
    per-point R-hat over the test points beside each mean (``thermalization/rhat_p25`` ...,
    ``thermalization/rhat_uninformed_p95``: the paper's Fig. 4), through the Trainer's logger connector (as
    Lightning writes ``self.log``'s values: every record reaches the loggers when it is made, whatever
    ``log_every_n_steps``).
    With ``summary_records``, :meth:`summary_section` adds the records themselves to ``summary.json``
    (``thermalization_records``: ``steps``, ``times_s`` and ``test_mse``, one list per chain), for scripts
    that apply the merge rule to them (:func:`merge_band`, :func:`merge_indices`).
    All traces are checkpointed (:meth:`state_dict`), so a resumed run continues them (its times
    continue from the last record's).
    Single-process runs only (every chain in one process).

    Args:
        informed_chains: number of leading chains the sampler starts at the teacher, checked against the
            sampler's ``informed_chains`` (>= 1; default 1, or 0 with ``informed_run``, the only value
            allowed with it).
        every_n_steps: sweeps between records (>= 1).
        window: records in the trailing mean of the merge rule (>= 1).
        tolerance: relative distance to phi-bar that always counts as merged (> 0).
        delta: the delta of S_phi(delta): tail probability of the informed band and the fraction of
            records allowed outside it after the merge, in (0, 1).
        reference_fraction: last fraction of the informed records taken as stationary, in (0, 1].
        rhat_points: test points whose outputs enter R-hat (>= 1; at most the test set).
        rhat_block: records per R-hat block (>= 4, as split R-hat needs).
        rhat_threshold: R-hat below which a block counts as converged (> 1).
        informed_run: a checkpoint (``.ckpt``) of an earlier run of this callback on the same teacher and
            test set whose informed chains serve as the reference (see above); ``None``: run them here.
        every_n_seconds: wall-clock seconds between records (> 0), instead of ``every_n_steps``; e.g. the
            Trainer's ``max_time`` over the number of records wanted. ``None``: by steps.
        summary_records: write the records into ``summary.json`` (:meth:`summary_section`).
    """

    def __init__(
        self,
        informed_chains: int | None = None,
        every_n_steps: int = 10,
        window: int = 10,
        tolerance: float = 0.2,
        delta: float = 0.1,
        reference_fraction: float = 0.5,
        rhat_points: int = 100,
        rhat_block: int = 50,
        rhat_threshold: float = 1.1,
        informed_run: str | None = None,
        every_n_seconds: float | None = None,
        summary_records: bool = False,
    ) -> None:
        if informed_run is None:
            self.informed_chains = check_int("informed_chains", 1 if informed_chains is None else informed_chains, 1)
        elif informed_chains not in (None, 0):
            raise ValueError(f"informed_chains must be 0 with informed_run (the informed chains are read from "
                             f"{informed_run!r}), got {informed_chains!r}")
        else:
            self.informed_chains = 0
        self.informed_run = informed_run
        self.every_n_steps = check_int("every_n_steps", every_n_steps, 1)
        self.window = check_int("window", window, 1)
        self.tolerance = check_interval("tolerance", tolerance, 0.0)
        self.delta = check_interval("delta", delta, 0.0, 1.0)
        self.reference_fraction = check_interval("reference_fraction", reference_fraction, 0.0, 1.0, high_closed=True)
        self.rhat_points = check_int("rhat_points", rhat_points, 1)
        self.rhat_block = check_int("rhat_block", rhat_block, 4)
        self.rhat_threshold = check_interval("rhat_threshold", rhat_threshold, 1.0)
        self.every_n_seconds = None if every_n_seconds is None else check_interval("every_n_seconds",
                                                                                   every_n_seconds, 0.0)
        self.summary_records = check_bool("summary_records", summary_records)
        self._start: float | None = None  # perf_counter at the start of training, less the time already recorded
        self._times: list[float] = []  # seconds since the start of training, one per record
        self._steps: list[int] = []
        self._mse: list[Tensor] = []
        self._score: list[Tensor] = []
        self._block: list[Tensor] = []
        self._rhat: list[Tensor] = []  # per block: a row of RHAT_COLUMNS (see traces)
        self._test: tuple[Tensor, Tensor] | None = None
        self._train: tuple[Tensor, Tensor] | None = None
        self._reference: tuple[Tensor, Tensor] | None = None  # informed_run's (steps (R,), test MSE (I, R))
        self._data_key = torch.zeros(0, dtype=torch.float64)  # teacher test outputs, then the training set's sums
        self._joint: JointDensity | None = None  # the sampler's target, for the score

    # ------------------------------------------------------------------ setup
    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit":
            return
        datamodule = trainer.datamodule
        teacher, _ = teacher_of(datamodule, "ThermalizationCheck")
        sampler_informed = getattr(pl_module, "informed_chains", None)
        if sampler_informed is None:
            raise ValueError("ThermalizationCheck needs a sampler with an informed start (NoisyGibbs, "
                             f"IntermediateHMC, HMC, MALA), got {type(pl_module).__name__}")
        if pl_module.num_chains <= self.informed_chains:
            raise ValueError(f"informed_chains ({self.informed_chains}) must be smaller than the sampler's "
                             f"num_chains ({pl_module.num_chains}): the other chains are the uninformed ones")
        check_student(teacher, pl_module.model, warn=False)  # the sampler warns about its informed start
        if sampler_informed != self.informed_chains:
            where = (f"its informed chains are read from {self.informed_run!r}" if self.informed_run is not None
                     else f"it compares the first {self.informed_chains} chains, started at the teacher, with the others")
            raise ValueError(f"the sampler's informed_chains ({sampler_informed}) must equal ThermalizationCheck's "
                             f"informed_chains ({self.informed_chains}): {where}; set the sampler's "
                             f"`informed_chains: {self.informed_chains}` (model.init_args.informed_chains)")
        x_test = datamodule.test_data.tensors[0]
        if len(x_test) == 0:
            raise ValueError("ThermalizationCheck needs a non-empty test split (num_test >= 1)")
        with torch.no_grad():
            stacked = {n: p.double().unsqueeze(0) for n, p in teacher.named_parameters()}
            self._test = (x_test, teacher.stacked_forward(stacked, x_test.double())[0])
        x, y = datamodule.train_data.tensors
        sums = torch.stack([torch.tensor(float(len(x))), x.double().sum(), y.double().sum(), y.double().square().sum()])
        self._data_key = torch.cat([self._test[1].flatten().cpu(), sums.cpu()])
        if self.informed_run is not None:
            self._reference = self._read_informed_run()

    def _read_informed_run(self) -> tuple[Tensor, Tensor]:
        """The informed chains' (steps, test MSE) records of ``informed_run``, checked to belong to a run on
        this run's teacher and data (its teacher's test outputs and training-set sums)."""
        checkpoint = torch.load(self.informed_run, map_location="cpu", weights_only=True)
        state = checkpoint.get("callbacks", {}).get(self.state_key)
        if state is None or "data_key" not in state:
            raise ValueError(f"informed_run {self.informed_run!r} holds no {type(self).__name__} records of a "
                             "teacher-student run (or was written by a version that did not save the teacher)")
        informed = int(state["informed_chains"])
        if informed == 0:
            raise ValueError(f"informed_run {self.informed_run!r} has no informed chain (it read its own from "
                             "another run): pass that run's checkpoint")
        recorded = state["data_key"]
        if recorded.shape != self._data_key.shape or not torch.allclose(recorded, self._data_key, rtol=1e-6,
                                                                         atol=1e-12):
            raise ValueError(f"informed_run {self.informed_run!r} was run on another teacher or data set: its "
                             "teacher's test outputs or its training set differ from this run's")
        return state["steps"].clone(), state["test_mse"][:informed].clone()

    # ---------------------------------------------------------------- records
    @torch.no_grad()
    def _score_statistic(self, pl_module) -> Tensor:
        """U of every chain (spec §4, App. B.3): :meth:`lit_bayes.noisy_energy.JointDensity.score`; NaN
        without latents (the classical posterior)."""
        if self._train is None:
            return torch.full((pl_module.num_chains,), math.nan, dtype=torch.float64)
        inputs, targets = self._train
        return self._joint.score(pl_module.chains.as_dict(), pl_module.latents.as_dict(), inputs, targets)

    @torch.no_grad()
    def _record(self, trainer, pl_module) -> None:
        x_test, reference = (t.to(pl_module.device) for t in self._test)
        outputs = pl_module.outputs(pl_module.chains.as_dict(), x_test).double()  # (C, n_test, d_out)
        mse = (outputs - reference).pow(2).mean((-2, -1)).cpu()
        score = self._score_statistic(pl_module).cpu().double()
        self._steps.append(int(trainer.global_step))
        self._times.append(time.perf_counter() - self._start)
        self._mse.append(mse)
        self._score.append(score)
        self._block.append(outputs[:, : self.rhat_points].flatten(1).cpu())
        logged = {f"{PREFIX}test_mse/chain_{c}": float(v) for c, v in enumerate(mse)}
        logged.update({f"{PREFIX}score/chain_{c}": float(v) for c, v in enumerate(score)})
        if len(self._block) == self.rhat_block:
            block = torch.stack(self._block, dim=1)  # (C, N, points)
            row = torch.full((RHAT_COLUMNS,), float(self._steps[-1]), dtype=torch.float64)
            for name, chains in zip(RHAT_SETS, (block, block[self.informed_chains:])):
                stats = self._block_rhat(chains) if name != "rhat" or self.informed_chains else _no_rhat()
                row[rhat_columns(name)] = stats
                names = [name] + [f"{name}_p{q}" for q in RHAT_PERCENTILES]
                logged.update({PREFIX + n: float(v) for n, v in zip(names, stats) if math.isfinite(v)})
            self._rhat.append(row)
            self._block = []
        # the Trainer's path to its loggers (log, then save, as for self.log): a long run's CSV fills as it goes
        trainer._logger_connector.log_metrics(logged, step=trainer.global_step)

    @staticmethod
    def _block_rhat(block: Tensor) -> Tensor:
        """Split R-hat of the outputs psi (App. A) over the test points: their mean, then the
        ``RHAT_PERCENTILES`` (all NaN for one chain or a constant output), ``(1 + len(RHAT_PERCENTILES),)``."""
        if block.shape[0] < 2 or not (block.std(dim=1) > 0).any():
            return _no_rhat()
        per_point = torch.as_tensor(split_rhat(block), dtype=torch.float64).flatten()
        quantiles = torch.tensor(RHAT_PERCENTILES, dtype=torch.float64) / 100
        return torch.cat([per_point.nanmean().reshape(1), torch.nanquantile(per_point, quantiles)])

    def on_train_start(self, trainer, pl_module) -> None:
        recorded = self._times[-1] if self._times and math.isfinite(self._times[-1]) else 0.0
        self._start = time.perf_counter() - recorded
        if hasattr(pl_module, "latents"):  # the intermediate posterior: the score needs the training set
            # in the sampler's canonical order (its latents' order); this also builds the initial latents,
            # as the first sweep would, from the same generator
            inputs, targets, _ = pl_module.sweep_inputs(tuple(t.to(pl_module.device)
                                                              for t in trainer.datamodule.train_data.tensors))
            self._train = (inputs, targets)
            self._joint = JointDensity(pl_module.model, pl_module.posterior.temperature)
        if not self._steps:  # not resumed: record the start (the informed chains at the teacher, MSE 0)
            self._record(trainer, pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.every_n_seconds is None:
            due = trainer.global_step % self.every_n_steps == 0
        else:  # the first step end after the next multiple of every_n_seconds
            due = time.perf_counter() - self._start >= self.every_n_seconds * len(self._times)
        if due:
            self._record(trainer, pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        if self.every_n_seconds is not None and self._steps and self._steps[-1] != trainer.global_step:
            self._record(trainer, pl_module)  # a run of a time budget: its last state too
        metrics = self.summary_metrics()  # written into summary.json by RunSummary
        if not metrics:
            return
        merge = metrics[PREFIX + "merge_step"]
        rank_zero_info(
            f"ThermalizationCheck: informed test MSE {metrics[PREFIX + 'informed_test_mse']:.3g}, uninformed "
            f"{metrics[PREFIX + 'uninformed_test_mse']:.3g}: "
            + (f"merged at step {merge:.0f}" if math.isfinite(merge) else
               f"not merged after {trainer.global_step} steps (teacher-student criterion, spec §4)"))

    # ----------------------------------------------------------------- report
    def traces(self) -> dict[str, Tensor]:
        """The records: ``steps`` ``(R,)``, ``test_mse`` and ``score`` ``(C, R)`` (float64), ``rhat``
        ``(B, RHAT_COLUMNS)`` rows (block end step, mean R-hat of all chains, of the uninformed chains, then
        the ``RHAT_PERCENTILES`` of all chains' per-point R-hat, then the uninformed chains'), and the informed
        chains' records read from ``informed_run``, ``reference_steps`` ``(R',)`` and ``reference_test_mse``
        ``(I, R')`` (empty when the run has informed chains of its own)."""
        chains = lambda rows: torch.stack(rows, dim=1) if rows else torch.zeros(0, 0, dtype=torch.float64)  # noqa: E731
        empty = torch.zeros(0, dtype=torch.float64)
        reference_steps, reference_mse = self._reference or (empty.long(), empty.reshape(0, 0))
        return {"steps": torch.tensor(self._steps, dtype=torch.long), "test_mse": chains(self._mse),
                "score": chains(self._score),
                "rhat": torch.stack(self._rhat) if self._rhat else torch.zeros(0, RHAT_COLUMNS, dtype=torch.float64),
                "reference_steps": reference_steps, "reference_test_mse": reference_mse}

    def summary_metrics(self) -> dict[str, float]:
        """The merge, R-hat and score results described in the class docstring (empty before ``window``
        records)."""
        if len(self._steps) < self.window:
            return {}
        traces = self.traces()
        steps, mse, score, rhat = traces["steps"], traces["test_mse"], traces["score"], traces["rhat"]
        informed_mse = mse[: self.informed_chains] if self._reference is None else self._reference[1]
        reference, low, high = merge_band(informed_mse, self.window, self.delta, self.tolerance,
                                          self.reference_fraction)
        uninformed = trailing_mean(mse[self.informed_chains:], self.window)
        merges = merge_indices(mse[self.informed_chains:], low, high, self.window, self.delta)
        merged = all(m is not None for m in merges)
        metrics = {
            "informed_test_mse": reference,
            "uninformed_test_mse": float(uninformed[:, -1].mean()),
            "band_low": low,
            "band_high": high,
            "merged": float(merged),
            "merged_fraction": sum(m is not None for m in merges) / len(merges),
            "merge_step": float(max(int(steps[m]) for m in merges)) if merged else math.nan,
            "records": float(len(steps)),
        }
        for chain, merge in enumerate(merges, start=self.informed_chains):
            metrics[f"merge_step/chain_{chain}"] = float(steps[merge]) if merge is not None else math.nan
        for name in RHAT_SETS:
            column, *percentiles = rhat_columns(name)
            values = rhat[:, column]
            found = settled_index(values < self.rhat_threshold, self.delta)  # NaN compares False
            metrics[name] = float(values[-1]) if len(values) else math.nan
            metrics[f"{name}_step"] = float(rhat[found, 0]) if found is not None else math.nan
            for q, percentile in zip(RHAT_PERCENTILES, percentiles):  # the last block's
                metrics[f"{name}_p{q}"] = float(rhat[-1, percentile]) if len(rhat) else math.nan
        sign = torch.sign(score[self.informed_chains:])
        crossed = (sign != sign[:, :1]) & (sign != 0) & ~sign.isnan()  # NaN: no score (no latents)
        first = [int(row.nonzero()[0]) if row.any() else None for row in crossed]
        metrics["score_step"] = float(max(int(steps[f]) for f in first)) if all(f is not None for f in first) \
            else math.nan
        return {PREFIX + key: value for key, value in metrics.items()}

    def times(self) -> Tensor:
        """Seconds since the start of training at each record ``(R,)`` (float64; a resumed run's continue from
        its last record's)."""
        return torch.tensor(self._times, dtype=torch.float64)

    def summary_section(self, trainer, pl_module) -> dict[str, Any]:
        """With ``summary_records``: ``{"thermalization_records": {"steps", "times_s", "test_mse"}}`` (lists;
        ``test_mse`` one list per chain, the informed chains first), for ``summary.json``
        (:class:`lit_bayes.callbacks.run_summary.RunSummary`); else nothing."""
        if not self.summary_records:
            return {}
        return {"thermalization_records": {"steps": list(self._steps), "times_s": list(self._times),
                                           "test_mse": self.traces()["test_mse"].tolist()}}

    # ------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        pending = torch.stack(self._block, dim=1) if self._block else torch.zeros(0, 0, 0, dtype=torch.float64)
        return {**self.traces(), "rhat_pending": pending, "informed_chains": torch.tensor(self.informed_chains),
                "data_key": self._data_key, "times": self.times()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._steps = [int(s) for s in state_dict["steps"]]
        times = state_dict.get("times")  # absent from checkpoints written before records were timed
        self._times = [float(t) for t in times] if times is not None and len(times) == len(self._steps) \
            else [math.nan] * len(self._steps)
        self._mse = list(state_dict["test_mse"].unbind(dim=1))
        self._score = list(state_dict["score"].unbind(dim=1))
        rhat = state_dict["rhat"]  # checkpoints written before the percentiles hold 3 columns: NaN for them
        missing = torch.full((rhat.shape[0], RHAT_COLUMNS - rhat.shape[1]), math.nan, dtype=rhat.dtype)
        self._rhat = list(torch.cat([rhat, missing], dim=1).unbind(dim=0))
        self._block = list(state_dict["rhat_pending"].unbind(dim=1))
        self._data_key = state_dict.get("data_key", self._data_key)
        reference = state_dict.get("reference_test_mse")
        self._reference = (state_dict["reference_steps"], reference) if reference is not None and reference.numel() \
            else None
