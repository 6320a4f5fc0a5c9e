"""Test-wide settings: one intra-op thread (the test models are tiny, and OpenMP threads
contend badly on small shared machines), W&B offline, ``gpu`` tests skipped without CUDA."""
import os

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
