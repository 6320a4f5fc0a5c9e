"""NLPD and the other metric states sync across 2 CPU processes (gloo)."""
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lit_bayes.metrics import NLPD, BrierScore


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, port, log_probs, probs, targets, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    nlpd, brier = NLPD(), BrierScore()
    share = slice(0, 3) if rank == 0 else slice(3, None)  # unequal shares on purpose
    nlpd.update(log_probs[share])
    brier.update(probs[share], targets[share])
    out[rank] = torch.stack([nlpd.compute().float(), brier.compute().float()])
    dist.destroy_process_group()


def test_nlpd_and_brier_are_global_under_ddp():
    torch.manual_seed(0)
    log_probs = -torch.rand(10) * 3
    probs = torch.softmax(torch.randn(10, 3), dim=-1)
    targets = torch.randint(3, (10,))
    out = mp.Manager().dict()
    mp.spawn(_worker, args=(_free_port(), log_probs, probs, targets, out), nprocs=2, join=True)
    expected_nlpd = -log_probs.mean()
    expected_brier = ((probs - torch.nn.functional.one_hot(targets, 3)) ** 2).sum(-1).mean()
    for rank in (0, 1):
        torch.testing.assert_close(out[rank], torch.stack([expected_nlpd, expected_brier]).float())
