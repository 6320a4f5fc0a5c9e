"""The full ``lit-bayes`` command: :class:`LitBayesCLI`, a LightningCLI with lit_bayes's always-on callbacks,
loggers and test-after-fit, and :func:`run`, which :func:`lit_bayes.cli.main` calls for anything but the
top-level help (the command's options are described in :mod:`lit_bayes.cli`).

Importing this module imports every sampler and DataModule of lit_bayes, so that ``lit-bayes fit --help``
lists them as the known subclasses under ``--model`` and ``--data``.
"""
from __future__ import annotations

import json
import logging
import netrc
import os
import signal
import sys
import warnings
from argparse import ArgumentError
from pathlib import Path
from typing import Callable, Literal, Optional, Sequence

import torch
from jsonargparse.typing import PositiveInt
from lightning.pytorch import LightningDataModule
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.warnings import PossibleUserWarning

import lit_bayes
import lit_bayes.data  # the DataModules: known subclasses under --data in `lit-bayes fit --help`
from lit_bayes.callbacks import (
    ChainDiagnostics,
    DiagnosticPlots,
    PosteriorSamples,
    PredictiveMarginal,
    ProgressLog,
    RunCheckpoint,
    RunHealth,
    RunSummary,
    UncertaintyMetrics,
)
from lit_bayes.cli_help import SUBCOMMANDS
from lit_bayes.run_directories import (
    check_checkpoint_path,
    check_resumed_data,
    claim_run_directory,
    continue_metrics,
    remove_failed_start,
    resumed_run_directory,
)
from lit_bayes.run_loading import KeptDraws, concat_predictives, newest_checkpoint, run_directory, save_predictions
from lit_bayes.samplers import SamplerModule
from lit_bayes.strategy import ChainParallel  # registers the "chain_parallel" strategy name

__all__ = [
    "ChainParallel", "LitBayesCLI", "fit_and_test", "last_checkpoint", "library_error", "quiet_known_noise", "run",
    "run_summary", "wandb_logged_in",
]


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
    """LightningCLI with lit_bayes's always-on callbacks, loggers and test-after-fit. Its subcommands are
    described by :data:`lit_bayes.cli_help.SUBCOMMANDS` (``parser_kwargs`` may replace a description).

    Attributes:
        new_run_directory: the log directory this command made (``None`` when it resumes a run in its own
            directory, or logs nowhere); removed again when fit, validate or test fails before writing
            anything but the start's files (:func:`lit_bayes.run_directories.remove_failed_start`).
        resume_from: for a CLI built without a subcommand, the checkpoint its caller resumes the fit from:
            the run then logs into that checkpoint's run directory, as ``fit --ckpt_path`` does.
    """

    def __init__(self, *args, parser_kwargs: dict | None = None, resume_from: str | os.PathLike | None = None,
                 **kwargs) -> None:
        self.new_run_directory: Path | None = None
        self.resume_from = resume_from
        described = {name: {"description": text} for name, text in SUBCOMMANDS.items()}
        super().__init__(*args, parser_kwargs={**described, **(parser_kwargs or {})}, **kwargs)

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--wandb", type=bool, default=True, help="log to W&B (offline unless logged in)")
        parser.add_argument("--wandb_project", type=str, default="lit-bayes", help="W&B project name")
        parser.add_argument("--test_after_fit", type=bool, default=True, help="run the test set after fit")
        parser.add_argument("--progress_every", type=PositiveInt, default=50,
                            help="redraw the progress bar every n training batches (and at each epoch's end)")
        parser.add_argument("--strict", type=bool, default=False,
                            help="exit with code 3 when the run's health verdict is 'failed' (after writing everything)")
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
        parser.add_lightning_class_args(RunHealth, "health")
        parser.add_lightning_class_args(RunSummary, "summary")
        parser.add_lightning_class_args(RunCheckpoint, "checkpoint")
        parser.add_lightning_class_args(ProgressLog, "progress_log")
        # one last.ckpt, overwritten: a version counter would write last-v1.ckpt beside it when a resumed run's path
        # is spelled another way than the checkpoint recorded
        parser.set_defaults({"checkpoint.save_last": True, "checkpoint.save_on_train_epoch_end": True,
                             "checkpoint.enable_version_counter": False})

    def _parse_ckpt_path(self) -> None:
        """Lightning's LightningCLI replaces the model's arguments by the hyperparameters saved in ``--ckpt_path``'s
        checkpoint, which would drop a value this command gives (``test --model.init_args.variant diagonal``)
        without a word. ``validate``, ``test`` and ``predict`` evaluate the checkpoint with the command's values;
        a resumed ``fit`` keeps the checkpoint's (the chain continues as it was saved). Either way each argument
        whose two values differ is named in a warning."""
        subcommand = self.config.get("subcommand")
        given = self._model_arguments()
        super()._parse_ckpt_path()
        saved = self._model_arguments()
        differ = sorted(name for name in given.keys() & saved.keys() if given[name] != saved[name])
        if not differ:
            return
        pairs = ", ".join(f"{name}: {given[name]!r} given, {saved[name]!r} saved" for name in differ)
        if subcommand == "fit":
            warnings.warn(f"fit --ckpt_path resumes with the checkpoint's model arguments, not the command's "
                          f"({pairs}): a resumed chain continues as it was saved; start a new run to change them",
                          stacklevel=2)
            return
        init_args = self.config[subcommand]["model"]["init_args"]
        for name in differ:
            init_args[name] = given[name]
        warnings.warn(f"{subcommand} evaluates the checkpoint with the command's model arguments, not those saved "
                      f"in it ({pairs})", stacklevel=2)

    def _model_arguments(self) -> dict:
        """The model's top-level ``init_args`` of the current subcommand's config, by name."""
        subcommand = self.config.get("subcommand")
        model = self.config.get(subcommand, {}).get("model") if subcommand else None
        init_args = model.get("init_args") if model is not None and hasattr(model, "get") else None
        return dict(vars(init_args)) if init_args is not None else {}

    def before_instantiate_classes(self) -> None:
        """Set the CPU threads; checkpoints hold tensors and plain values only: load them with ``weights_only``;
        a ``--ckpt_path`` with no file there fails here, before the log directory is made."""
        config = self.config.get(self.subcommand) if self.subcommand else self.config
        if config is not None and config.get("threads") is not None:
            torch.set_num_threads(config.threads)
        if config is not None and "weights_only" in config and config.weights_only is None:
            config.weights_only = True
        if self.subcommand == "predict":
            self.prepare_predict(config)
        if config is not None:
            check_checkpoint_path(config.get("ckpt_path"))

    def prepare_predict(self, config) -> None:
        """``lit-bayes predict`` reads a finished run: the checkpoint defaults to the one with the most steps in
        ``checkpoints/`` beside the ``-c`` config (:func:`~lit_bayes.run_loading.newest_checkpoint`), so
        ``lit-bayes predict -c <run_dir>/config.yaml`` works; no new log directory or config file is made, and
        the checkpoint callback (which saves nothing in predict) keeps the run's folder."""
        if config.ckpt_path is None:
            given = [newest_checkpoint((Path(str(c)).parent / "checkpoints").glob("*.ckpt"))
                     for c in (config.get("config") or [])[-1:]]
            if not given or given[0] is None:
                raise ValueError(
                    "lit-bayes predict needs --ckpt_path (a run's checkpoints/last.ckpt) or -c <run_dir>/config.yaml"
                )
            config.ckpt_path = str(given[0])
        config.trainer.logger = False
        self.save_config_callback = None
        if config.checkpoint.dirpath is None:
            config.checkpoint.dirpath = str(Path(config.ckpt_path).parent)

    def resumed_checkpoint(self, config) -> str | os.PathLike | None:
        """The checkpoint a fit resumes from: ``--ckpt_path`` of ``fit``, or ``resume_from`` of a CLI built
        without a subcommand (:func:`fit_and_test`, which passes the checkpoint to ``Trainer.fit`` itself)."""
        if self.subcommand is None:
            return self.resume_from
        return config.ckpt_path if self.subcommand == "fit" else None

    def instantiate_trainer(self, **kwargs):
        """The Trainer, logging to a new ``<root>/version_<n>`` (and W&B), or, for a fit resuming a run under
        the same root, to that run's directory (:func:`lit_bayes.run_directories.resumed_run_directory`)."""
        config = self.config[self.subcommand] if self.subcommand else self.config
        if config.trainer.logger in (None, True):
            root = config.trainer.default_root_dir or "runs"
            checkpoint = self.resumed_checkpoint(config)
            check_resumed_data(checkpoint, config.data.as_dict() if hasattr(config.data, "as_dict") else config.data)
            resumed = resumed_run_directory(checkpoint, root)
            if resumed is not None:
                csv = CSVLogger(root, name="", version=resumed.name)
                continue_metrics(csv, checkpoint)
                # the run's own checkpoints are there: expected, not a clash
                warnings.filterwarnings("ignore", r"Checkpoint directory .* exists and is not empty")
            else:
                version = claim_run_directory(root) if "://" not in str(root) else None  # remote: the logger's own
                csv = CSVLogger(root, name="", version=version)
                csv.experiment  # creates the new version directory while it is empty (no "previous log files" warning)
                self.new_run_directory = Path(csv.log_dir)
            loggers = [csv]
            if config.wandb:
                os.makedirs(csv.log_dir, exist_ok=True)
                wandb_logger = WandbLogger(
                    project=config.wandb_project,
                    save_dir=csv.log_dir,
                    offline=os.environ.get("WANDB_MODE") == "offline" or not wandb_logged_in(),
                )
                # Lightning passes anonymous=None, which W&B warns has no effect; leaving it out changes nothing
                wandb_logger._wandb_init.pop("anonymous", None)
                loggers.append(wandb_logger)
            kwargs["logger"] = loggers
        trainer = super().instantiate_trainer(**kwargs)
        bar = trainer.progress_bar_callback
        if type(bar) is TQDMProgressBar and bar.refresh_rate == 1 and config.progress_every != 1:
            # Lightning's default bar redraws at every batch, ~10% of a run of short steps; a bar the
            # config gives with its own refresh rate is left alone
            trainer.callbacks[trainer.callbacks.index(bar)] = TQDMProgressBar(refresh_rate=config.progress_every)
        return trainer

    def fit(self, **kwargs) -> None:
        """``Trainer.fit`` (LightningCLI runs a subcommand through the CLI's method of its name when there is one)."""
        self._run_or_clean(self.trainer.fit, kwargs)

    def validate(self, **kwargs) -> None:
        """``Trainer.validate``, as :meth:`fit`."""
        self._run_or_clean(self.trainer.validate, kwargs)

    def test(self, **kwargs) -> None:
        """``Trainer.test``, as :meth:`fit`."""
        self._run_or_clean(self.trainer.test, kwargs)

    def _run_or_clean(self, method: Callable, kwargs: dict) -> None:
        """Run ``method``; when it fails, remove :attr:`new_run_directory` if the start wrote nothing else."""
        try:
            method(**kwargs)
        except BaseException:
            if self.new_run_directory is not None and self.trainer.is_global_zero:
                if any(isinstance(logger, WandbLogger) for logger in self.trainer.loggers):
                    import wandb

                    if wandb.run is not None:
                        wandb.finish(exit_code=1)
                remove_failed_start(self.new_run_directory)
            raise

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
        health = next(c for c in self.trainer.callbacks if isinstance(c, RunHealth)).health
        if self.config.fit.strict and health is not None and health.verdict == "failed":
            raise SystemExit(3)

    def after_validate(self) -> None:
        self.finish_wandb()

    def after_test(self) -> None:
        self.finish_wandb()

    def before_predict(self) -> None:
        """Predict over the draws the run kept: :class:`KeptDraws` takes the place of this command's
        empty ``PosteriorSamples`` and reads them when Lightning restores the checkpoint."""
        ckpt_path = self.config.predict.ckpt_path
        self.trainer.callbacks[:] = [c for c in self.trainer.callbacks if not isinstance(c, PosteriorSamples)]
        self.trainer.callbacks.append(KeptDraws(run_directory(ckpt_path), self.config.predict.get("samples")))

    def after_predict(self) -> None:
        """Write the predictions to ``<run_dir>/predictions.safetensors`` and say where."""
        batches = self.trainer.predict_loop.predictions
        if batches and self.trainer.is_global_zero:
            ckpt_path = self.config.predict.ckpt_path
            path = run_directory(ckpt_path) / "predictions.safetensors"
            predictive = concat_predictives(batches)
            save_predictions(path, predictive, {"checkpoint": str(Path(ckpt_path).resolve()),
                                                "sampler": type(self.model).__name__})
            points = next(v.shape[0] for v in (predictive.log_probs, predictive.mean) if v is not None)
            print(f"lit-bayes predict: predictions of {points} points written to {path}")
        self.finish_wandb()


def quiet_known_noise() -> None:
    """Drop the known-harmless messages of the dependencies from ``lit-bayes`` runs (set by the command,
    not at import, so library users keep them): Lightning's tip to install its cloud logger, its note
    that it loads the training loader to count the run's steps (the sampler does, for its burn-in), its
    DataLoader-worker advice (the data sets are in-memory tensors), its zero-length-loader note (an empty
    validation split is allowed) and the deprecations that its own pytree and all-gather helpers trigger in torch."""
    for message, category, module in (
        (r"The '\w+' does not have many workers", PossibleUserWarning, r"lightning\.pytorch\."),
        (r"Total length of `\w+` across ranks is zero", UserWarning, r"lightning\.pytorch\.utilities\.data"),
        (r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning, r"lightning\.pytorch\.utilities\._pytree"),
        (r"torch\.distributed\.nn\.functional\.\w+ is deprecated", FutureWarning, r"lightning\.fabric\.utilities\."),
    ):
        warnings.filterwarnings("ignore", message, category, module)
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_not_known_info)


def _not_known_info(record: logging.LogRecord) -> bool:
    """A logging filter passing every record but Lightning's ``litlogger`` tip and step-count note."""
    return not any(noise in str(record.msg) for noise in ("litlogger", "to estimate number of stepping batches"))


def library_error(error: BaseException) -> BaseException | None:
    """The library's own report behind ``error``: the outermost ``ValueError`` or ``FloatingPointError``
    in its chain of causes that lit_bayes code raised (bad arguments or data), or ``None`` (a bug)."""
    roots = tuple(str(Path(module.__file__).parent) + os.sep for module in (lit_bayes, lit_bayes.callbacks))
    while error is not None:
        frame = error.__traceback__
        while frame is not None and frame.tb_next is not None:
            frame = frame.tb_next
        if (isinstance(error, (ValueError, FloatingPointError)) and frame is not None
                and frame.tb_frame.f_code.co_filename.startswith(roots)):
            return error
        error = error.__cause__
    return None


def make_cli(args: Sequence[str] | None, **options) -> LitBayesCLI:
    """The ``lit-bayes`` CLI on ``args``: any sampler under ``--model``, any DataModule under ``--data``, the config
    file overwritten in the run directory, optimisers configured by the samplers themselves. ``options`` go to
    :class:`LitBayesCLI` (``run=False`` parses and instantiates without running a subcommand)."""
    return LitBayesCLI(SamplerModule, LightningDataModule, subclass_mode_model=True, subclass_mode_data=True,
                       save_config_kwargs={"overwrite": True}, auto_configure_optimizers=False,
                       args=None if args is None else list(args), **options)


def run(args: list[str] | None = None) -> None:
    """The ``lit-bayes`` command (:func:`lit_bayes.cli.main`) with the full CLI. A bad argument or data set
    (a ``ValueError`` or ``FloatingPointError`` of the library, a command line the parser rejects, Trainer
    settings Lightning rejects) is reported as ``lit-bayes: error: <message>`` with exit code 2 and no
    traceback or usage text (``LIT_BAYES_TRACEBACK=1`` shows the traceback); any other exception keeps
    its traceback. A run stopped by SIGTERM exits with code 143 (128 + SIGTERM) once its checkpoint is written
    (:class:`~lit_bayes.callbacks.RunCheckpoint`)."""
    quiet_known_noise()
    try:
        make_cli(args, parser_kwargs={"exit_on_error": False})  # parse errors raise: reported below, without usage
    except SIGTERMException:
        raise SystemExit(128 + signal.SIGTERM) from None
    except (ArgumentError, MisconfigurationException, ValueError, FloatingPointError) as error:
        user_error = isinstance(error, (ArgumentError, MisconfigurationException))
        reported = library_error(error) or (error if user_error else None)
        if reported is None or os.environ.get("LIT_BAYES_TRACEBACK", "0") not in ("", "0"):
            raise
        hint = "`lit-bayes fit --help` lists the options" if isinstance(reported, ArgumentError) else \
            "LIT_BAYES_TRACEBACK=1 shows the traceback"
        sys.stderr.write(f"lit-bayes: error: {reported}\n({hint})\n")
        raise SystemExit(2) from None


def fit_and_test(config: str | os.PathLike, overrides: Sequence[str] = (), train_transform: Callable | None = None,
                 ckpt_path: str | os.PathLike | None = None) -> LitBayesCLI:
    """``lit-bayes fit -c config *overrides`` (no W&B; no progress bar, :class:`ProgressLog`'s lines instead),
    for scripts that read the run afterwards: returns the CLI, whose ``model``, ``datamodule`` and
    ``trainer`` (with its callbacks) hold the final chain and the kept samples. ``train_transform``
    replaces the DataModule's (a callable does not go through a config); ``ckpt_path`` continues a run
    from its checkpoint (chain, sample store and step count)."""
    cli = make_cli(["-c", str(config), "--wandb", "false", "--trainer.enable_progress_bar", "false", *overrides],
                   run=False, resume_from=ckpt_path)
    if train_transform is not None:
        cli.datamodule.train_transform = train_transform
    cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=ckpt_path)
    cli.trainer.test(cli.model, datamodule=cli.datamodule)
    return cli


def last_checkpoint(root: str | os.PathLike) -> Path | None:
    """The checkpoint with the most steps of the runs under ``root`` (``version_*/checkpoints``, or
    ``checkpoints`` for a run without a logger), or None (:func:`~lit_bayes.run_loading.newest_checkpoint`)."""
    root = Path(root)
    return newest_checkpoint([*root.glob("version_*/checkpoints/*.ckpt"), *root.glob("checkpoints/*.ckpt")])


def run_summary(cli: LitBayesCLI) -> dict:
    """The ``summary.json`` that the run of :func:`fit_and_test` wrote."""
    (writer,) = [c for c in cli.trainer.callbacks if isinstance(c, RunSummary)]
    return json.loads(writer.path.read_text())
