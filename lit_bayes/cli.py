"""The ``lit-bayes`` command: LightningCLI over every sampler module and DataModule.

    lit-bayes fit -c recipes/xor_sgld.yaml          # sample, then test; writes summary.json
    lit-bayes fit -c recipes/xor_sgld.yaml --wandb false
    lit-bayes test -c recipes/xor_sgld.yaml --ckpt_path runs/.../last.ckpt

Every run logs to a CSV logger (its directory ``<default_root_dir>/version_<n>`` holds
``summary.json``, plots and samples) and, unless ``--wandb false``, to Weights & Biases:
offline when no W&B account is logged in (``wandb sync`` uploads the run later), online
when one is. The sample-keeping, predictive, metric, diagnostics, plot and summary
callbacks are always on, and so is a ``ModelCheckpoint`` writing ``last.ckpt`` at every
epoch end (resume with ``--ckpt_path``); their settings are the config sections
``samples``, ``predictive``, ``metrics``, ``diagnostics``, ``plots``, ``summary`` and
``checkpoint``.
"""
from __future__ import annotations

import json
import netrc
import os
from pathlib import Path
from typing import Callable, Literal, Optional, Sequence

import torch
from jsonargparse.typing import PositiveInt
from lightning.pytorch import LightningDataModule
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.loggers import CSVLogger, WandbLogger

from lit_bayes.callbacks import (
    ChainDiagnostics,
    DiagnosticPlots,
    PosteriorSamples,
    PredictiveMarginal,
    RunSummary,
    UncertaintyMetrics,
)
from lit_bayes.samplers import SamplerModule
from lit_bayes.strategy import ChainParallel  # registers the "chain_parallel" strategy name

__all__ = ["ChainParallel", "LitBayesCLI", "fit_and_test", "last_checkpoint", "main", "run_summary", "wandb_logged_in"]


def wandb_logged_in() -> bool:
    """Whether W&B credentials are available (``WANDB_API_KEY`` or a netrc entry)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        host = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai").split("//")[-1]
        return netrc.netrc().authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


class LitBayesCLI(LightningCLI):
    """LightningCLI with lit_bayes's always-on callbacks, loggers and test-after-fit."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--wandb", type=bool, default=True, help="log to W&B (offline unless logged in)")
        parser.add_argument("--wandb_project", type=str, default="lit-bayes", help="W&B project name")
        parser.add_argument("--test_after_fit", type=bool, default=True, help="run the test set after fit")
        parser.add_argument(
            "--test_ckpt", type=Literal["current", "best"], default="current",
            help="test after fit with the state at the end of fit, or with the checkpoint callback's best "
                 "(model selection, e.g. checkpoint.monitor=val/nlpd)",
        )
        parser.add_argument(
            "--threads", type=Optional[PositiveInt], default=None,
            help="torch intra-op CPU threads (default: torch's). 1 for small networks on a shared machine: "
                 "several threads on the tiny products of a small net can be far slower than one",
        )
        parser.add_lightning_class_args(PosteriorSamples, "samples")
        parser.add_lightning_class_args(PredictiveMarginal, "predictive")
        parser.add_lightning_class_args(UncertaintyMetrics, "metrics")
        parser.add_lightning_class_args(ChainDiagnostics, "diagnostics")
        parser.add_lightning_class_args(DiagnosticPlots, "plots")
        parser.add_lightning_class_args(RunSummary, "summary")
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults({"checkpoint.save_last": True, "checkpoint.save_on_train_epoch_end": True})

    def before_instantiate_classes(self) -> None:
        """Set the CPU threads; checkpoints hold tensors and plain values only: load them with ``weights_only``."""
        config = self.config.get(self.subcommand) if self.subcommand else self.config
        if config is not None and config.get("threads") is not None:
            torch.set_num_threads(config.threads)
        if config is not None and "weights_only" in config and config.weights_only is None:
            config.weights_only = True

    def instantiate_trainer(self, **kwargs):
        config = self.config[self.subcommand] if self.subcommand else self.config
        if config.trainer.logger in (None, True):
            root = config.trainer.default_root_dir or "runs"
            csv = CSVLogger(root, name="")
            loggers = [csv]
            if config.wandb:
                os.makedirs(csv.log_dir, exist_ok=True)
                loggers.append(
                    WandbLogger(
                        project=config.wandb_project,
                        save_dir=csv.log_dir,
                        offline=os.environ.get("WANDB_MODE") == "offline" or not wandb_logged_in(),
                    )
                )
            kwargs["logger"] = loggers
        return super().instantiate_trainer(**kwargs)

    def finish_wandb(self) -> None:
        """Close the W&B run so its files are complete when the command returns."""
        for logger in self.trainer.loggers:
            if isinstance(logger, WandbLogger):
                logger.experiment.finish()

    def after_fit(self) -> None:
        if self.config.fit.test_after_fit and self.datamodule is not None:
            ckpt_path = "best" if self.config.fit.test_ckpt == "best" else None
            self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path=ckpt_path)
        self.finish_wandb()

    def after_validate(self) -> None:
        self.finish_wandb()

    def after_test(self) -> None:
        self.finish_wandb()

    def after_predict(self) -> None:
        self.finish_wandb()


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``lit-bayes`` console script."""
    LitBayesCLI(
        SamplerModule,
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        save_config_kwargs={"overwrite": True},
        args=args,
        auto_configure_optimizers=False,
    )


def fit_and_test(config: str | os.PathLike, overrides: Sequence[str] = (), train_transform: Callable | None = None,
                 ckpt_path: str | os.PathLike | None = None) -> LitBayesCLI:
    """``lit-bayes fit -c config *overrides`` (no W&B, no progress bar), for scripts that read the run
    afterwards: returns the CLI, whose ``model``, ``datamodule`` and ``trainer`` (with its callbacks)
    hold the final chain and the kept samples. ``train_transform`` replaces the DataModule's (a callable
    does not go through a config); ``ckpt_path`` continues a run from its checkpoint (chain, sample
    store and step count)."""
    cli = LitBayesCLI(SamplerModule, LightningDataModule, subclass_mode_model=True, subclass_mode_data=True,
                      save_config_kwargs={"overwrite": True}, auto_configure_optimizers=False, run=False,
                      args=["-c", str(config), "--wandb", "false", "--trainer.enable_progress_bar", "false",
                            *overrides])
    if train_transform is not None:
        cli.datamodule.train_transform = train_transform
    cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=ckpt_path)
    cli.trainer.test(cli.model, datamodule=cli.datamodule)
    return cli


def last_checkpoint(root: str | os.PathLike) -> Path | None:
    """The newest ``last.ckpt`` of the runs under ``root`` (``version_*/checkpoints``), or None."""
    found = sorted(Path(root).glob("version_*/checkpoints/last.ckpt"), key=lambda path: path.stat().st_mtime)
    return found[-1] if found else None


def run_summary(cli: LitBayesCLI) -> dict:
    """The ``summary.json`` that the run of :func:`fit_and_test` wrote."""
    (writer,) = [c for c in cli.trainer.callbacks if isinstance(c, RunSummary)]
    return json.loads(writer.path.read_text())


if __name__ == "__main__":
    main()
