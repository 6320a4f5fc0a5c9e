"""The subcommands of ``lit-bayes`` and its top-level help, answered without importing torch or Lightning.

:data:`SUBCOMMANDS` is the one list of the command's subcommands: the full CLI
(:class:`lit_bayes.lightning_cli.LitBayesCLI`) describes its subcommands with it, and
``lit-bayes --help`` prints it from a plain ``argparse`` parser in a fraction of a second.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence

__all__ = ["SUBCOMMANDS", "asks_top_level_help", "top_level_parser"]

SUBCOMMANDS = {
    "fit": "Sample the posterior, then test the kept draws (--test_after_fit false skips the test); "
           "writes summary.json, plots and checkpoints/last.ckpt into the run directory.",
    "validate": "Evaluate a checkpoint's kept draws on the validation set (--ckpt_path).",
    "test": "Evaluate a checkpoint's kept draws on the test set (--ckpt_path).",
    "predict": "Write the predictive of a finished run's kept draws to <run_dir>/predictions.safetensors "
               "(lit-bayes predict -c <run_dir>/config.yaml).",
}
HELP_FLAGS = ("-h", "--help")
CONFIG_FLAGS = ("-c", "--config")


def asks_top_level_help(args: Sequence[str]) -> bool:
    """Whether ``args`` ask for the top-level help: ``-h``/``--help`` before any subcommand name
    (a ``-c``/``--config`` value is skipped)."""
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in CONFIG_FLAGS:
            skip = True
        elif arg in SUBCOMMANDS:
            return False
        elif arg in HELP_FLAGS:
            return True
    return False


def top_level_parser() -> argparse.ArgumentParser:
    """The top level of ``lit-bayes`` (its options and subcommands) as a plain parser, for its help text."""
    parser = argparse.ArgumentParser(
        prog="lit-bayes",
        description="PyTorch Lightning samplers for Bayesian neural network posteriors (a LightningCLI).",
        epilog="lit-bayes <subcommand> --help       the options of a subcommand, e.g. lit-bayes fit --help\n"
               "lit-bayes fit --model.help SGMCMC   the options of one sampler (--data.help NoisyXOR: one DataModule)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-c", "--config", metavar="CONFIG",
                        help="path to a configuration file in json or yaml format")
    parser.add_argument("--print_config", nargs="?", metavar="flags",
                        help="print the configuration after applying all other arguments and exit "
                             "(flags: skip_default, skip_unset)")
    subcommands = parser.add_subparsers(title="subcommands", metavar="{" + ",".join(SUBCOMMANDS) + "}")
    for name, description in SUBCOMMANDS.items():
        subcommands.add_parser(name, help=description)
    return parser
