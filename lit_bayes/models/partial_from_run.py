"""A partial BNN read back from a finished run, psi held fixed: the second stage of the two-stage
baselines of the Feynman-Kac paper (MAP-HMC and SGSMC-HMC, feynman-kac spec §5).

Stage 1 estimates psi with any sampler of a :class:`~lit_bayes.models.PartialBNN` (``MAP`` over
the whole network, or ``SGSMC``/``OHSMC`` over phi with psi trained); stage 2 samples phi given
that psi with a generic sampler (``HMC``). In a config::

    model:
      class_path: lit_bayes.HMC
      init_args:
        model:
          class_path: lit_bayes.models.PartialFromRun
          init_args: {run_dir: runs/stage1}
        init: template   # the chain starts at stage 1's phi (draw ``draw`` of its state)
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from lit_bayes.models.partial_bnn import PartialBNN
from lit_bayes.validation import check_int

__all__ = ["PartialFromRun", "find_checkpoint"]


def find_checkpoint(run_dir: str | os.PathLike) -> Path:
    """``<run_dir>/checkpoints/last.ckpt``, else the run's only checkpoint there (a run that kept
    only its best validation state); ``ValueError`` otherwise."""
    folder = Path(run_dir) / "checkpoints"
    if (folder / "last.ckpt").exists():
        return folder / "last.ckpt"
    found = sorted(folder.glob("*.ckpt"))
    if len(found) != 1:
        raise ValueError(f"run_dir {run_dir}: expected last.ckpt or exactly one .ckpt under {folder}, "
                         f"found {[p.name for p in found]}: pass checkpoint=")
    return found[0]


class PartialFromRun(PartialBNN):
    """The partial BNN of a finished ``lit-bayes fit`` run, with its trained values and psi fixed.

    The run's sampler module is rebuilt and loaded by :func:`lit_bayes.load_run`; every parameter
    takes the value of the run's state: the ``draw``-th chain (MAP, SG-MCMC) or particle
    (OHSMC, SGSMC) for the sampled parameters, the module's own value for the others (the psi
    that a Feynman-Kac sampler trains). Then :meth:`PartialBNN.fix_deterministic` holds psi fixed,
    so a generic sampler samples phi only, started at the run's phi with ``init="template"``.

    Args:
        run_dir: the run's log directory (holding ``config.yaml`` and ``checkpoints/``).
        checkpoint: the checkpoint to read (default: :func:`find_checkpoint`).
        draw: which chain or particle gives the values of the sampled parameters (default the first).
    """

    def __init__(self, run_dir: str, checkpoint: str | None = None, draw: int = 0) -> None:
        from lit_bayes.run_loading import load_run  # run_loading imports the samplers, which import models

        draw = check_int("draw", draw, 0)
        run = load_run(run_dir, find_checkpoint(run_dir) if checkpoint is None else checkpoint)
        source = run.module.model
        if not isinstance(source, PartialBNN):
            raise ValueError(f"run_dir {run_dir}: the run's model is a {type(source).__name__}, not a PartialBNN")
        available = int(run.log_weights.shape[0])
        if draw >= available:
            raise ValueError(f"draw must be below the run's {available} chain(s)/particle(s), got {draw}")
        own = dict(source.named_parameters())
        with torch.no_grad():
            for name, value in run.samples.items():
                # generic samplers name parameters "net.<module name>", the Feynman-Kac ones by the
                # PartialBNN's own names of phi
                target = name if name in own else name[len("net."):] if name.startswith("net.") else None
                if target not in own:
                    if name.startswith("likelihood."):
                        continue
                    raise ValueError(f"run_dir {run_dir}: state {name!r} is no parameter of the run's model")
                own[target].copy_(value[draw].to(own[target].dtype))
        super().__init__(source.net.cpu(), source.stochastic_names)
        self.run_dir = str(run_dir)
        self.fix_deterministic()

    def stacked_forward(self, params, x):
        """:meth:`PartialBNN.stacked_forward` on ``x`` cast to the parameters' dtype: callbacks such
        as ``ChainDiagnostics`` pass held-out inputs that the Trainer's precision did not convert."""
        if torch.is_floating_point(x):
            x = x.to(next(iter(params.values())).dtype)
        return super().stacked_forward(params, x)
