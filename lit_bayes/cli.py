"""The ``lit-bayes`` command: LightningCLI over every sampler module and DataModule.

    lit-bayes fit -c recipes/main.yaml          # sample, then test; writes summary.json
    lit-bayes fit -c recipes/main.yaml --wandb false --strict true
    lit-bayes fit -c recipes/main.yaml --ckpt_path runs/main/version_0/checkpoints/last.ckpt   # resume in version_0
    lit-bayes test -c recipes/main.yaml --ckpt_path runs/.../last.ckpt
    lit-bayes predict -c runs/.../version_0/config.yaml   # writes version_0/predictions.safetensors

Every run logs to a CSV logger (its directory ``<default_root_dir>/version_<n>`` holds
``summary.json``, plots and samples) and, unless ``--wandb false``, to Weights & Biases:
offline when no W&B account is logged in (``wandb sync`` uploads the run later), online
when one is. A fit resumed from a checkpoint of a run under the same ``default_root_dir``
continues in that run's directory (:mod:`lit_bayes.run_directories`); a start that fails before
its first step (a missing ``--ckpt_path``, a data file that is not there) leaves no directory.
The sample-keeping, predictive, metric, diagnostics, plot and summary callbacks are always on, and
so are ``RunHealth`` (the run's verdict, printed and written to ``summary.json``; ``--strict true``
exits with code 3 when it is ``failed``) and a ``RunCheckpoint`` writing ``last.ckpt`` at epoch ends
at most every 1,000 steps or 10 minutes and at the end of fit (resume with ``--ckpt_path``); their
settings are the config sections ``samples``, ``predictive``, ``metrics``, ``diagnostics``,
``health``, ``plots``, ``summary`` and ``checkpoint``.

This module only starts the command: ``lit-bayes --help`` is answered from
:mod:`lit_bayes.cli_help` without importing torch or Lightning, and everything else runs in
:mod:`lit_bayes.lightning_cli`, whose names (``LitBayesCLI``, ``fit_and_test``, ``run_summary``, ...)
are also importable from here.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence

from lit_bayes.cli_help import asks_top_level_help, top_level_parser

__all__ = ["main"]

# the names of lit_bayes.lightning_cli that this module hands out on first use (PEP 562)
LIGHTNING_CLI_NAMES = frozenset({
    "ChainParallel", "LitBayesCLI", "fit_and_test", "last_checkpoint", "library_error", "quiet_known_noise",
    "run_summary", "wandb_logged_in",
})


def main(args: Sequence[str] | None = None) -> None:
    """Entry point of the ``lit-bayes`` console script (``args``: the command line, default
    ``sys.argv[1:]``). The top-level help is printed at once, without loading the full CLI (exit
    code 0); anything else runs :func:`lit_bayes.lightning_cli.run`."""
    if asks_top_level_help(sys.argv[1:] if args is None else args):
        top_level_parser().print_help()
        raise SystemExit(0)
    from lit_bayes.lightning_cli import run

    run(None if args is None else list(args))


def __getattr__(name: str):
    if name in LIGHTNING_CLI_NAMES:
        from lit_bayes import lightning_cli

        return getattr(lightning_cli, name)
    raise AttributeError(f"module 'lit_bayes.cli' has no attribute {name!r}")


if __name__ == "__main__":
    main()
