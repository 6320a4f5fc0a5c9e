"""``ProgressLog``: runs without a progress bar (scripts, recipe grids, log files) print where they are,
their rate and the time left; a resumed run counts from the step it resumed at; a bar silences it."""
import os
import re
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_bayes.callbacks import ProgressLog
from lit_bayes.callbacks.progress_log import format_duration
from lit_bayes.cli import fit_and_test
from lit_bayes.data import SyntheticRegression
from tests.resume_runs import make_sampler

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "xor_sgld.yaml"
LINE = re.compile(r"^lit-bayes: step (\d+) / (\d+) \((\d+) %\), .+ in this process \(([\d.e+-]+) steps/s"
                  r"(?:; [\d.e+-]+ in the last [^)]+)?\), ~.+ left$")


def progress_lines(text: str) -> list[re.Match]:
    return [m for m in map(LINE.match, text.splitlines()) if m]


def fit(root, epochs, bar=False, ckpt_path=None):
    """4 steps an epoch, a checkpoint at every epoch's end, a ProgressLog that prints after every step."""
    torch.set_num_threads(1)
    data = SyntheticRegression(num_train=40, num_val=10, num_test=10, batch_size=10, seed=3)
    callbacks = [ProgressLog(every_s=1e-9), ModelCheckpoint(dirpath=os.path.join(root, "ckpt"), save_last=True)]
    trainer = L.Trainer(max_epochs=epochs, logger=False, enable_progress_bar=bar, enable_model_summary=False,
                        limit_val_batches=0, callbacks=callbacks, default_root_dir=root)
    trainer.fit(make_sampler("sgld"), datamodule=data, ckpt_path=ckpt_path)


def test_format_duration():
    assert [format_duration(s) for s in (0.4, 42.3, 125, 3600, 3725.4)] == \
        ["0 s", "42 s", "2 min 5 s", "1 h 0 min", "1 h 2 min"]


def test_line_rate_and_time_left_are_this_process_s():
    log = ProgressLog()
    log._start_step = 100
    assert log.line(400, 1000, 300.0) == \
        "lit-bayes: step 400 / 1000 (40 %), 5 min 0 s in this process (1 steps/s), ~10 min 0 s left"
    assert log.line(400, float("inf"), 300.0) == "lit-bayes: step 400, 5 min 0 s in this process (1 steps/s)"


def test_time_left_follows_the_rate_since_the_line_before():
    """A process that was slow at first (a paused run, a checkpoint load, a compile) and is fast now: the
    estimate takes the latest rate, not the process's mean."""
    log = ProgressLog()
    log._start_step = 0
    assert log.line(1000, 4000, 600.0, recent=(900, 300.0)) == (
        "lit-bayes: step 1000 / 4000 (25 %), 10 min 0 s in this process (1.67 steps/s; 3 in the last 5 min 0 s), "
        "~16 min 40 s left")


def test_every_step_counted_and_a_resumed_run_counts_from_its_checkpoint(tmp_path, capsys):
    fit(tmp_path, epochs=2)
    steps = [(int(m[1]), int(m[2])) for m in progress_lines(capsys.readouterr().err)]
    assert steps == [(k, 8) for k in range(1, 9)]
    fit(tmp_path, epochs=3, ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    steps = [(int(m[1]), int(m[2])) for m in progress_lines(capsys.readouterr().err)]
    assert steps == [(k, 12) for k in range(9, 13)]  # the rate counts these 4 steps only


def test_silent_beside_a_progress_bar(tmp_path, capsys):
    fit(tmp_path, epochs=1, bar=True)
    assert not progress_lines(capsys.readouterr().err)


def test_scripts_runs_print_it_and_every_s_is_checked(tmp_path, capsys):
    fit_and_test(RECIPE, ["--trainer.max_epochs", "1", "--model.init_args.num_chains", "2", "--model.init_args.burn_in",
                          "5", "--model.init_args.num_draws", "null", "--progress_log.every_s", "1e-9",
                          "--trainer.default_root_dir", str(tmp_path)])
    lines = progress_lines(capsys.readouterr().err)
    assert lines and lines[-1][1] == lines[-1][2] and lines[-1][3] == "100"
    with pytest.raises(ValueError, match="every_s"):
        ProgressLog(every_s=0)
