"""torch optimisers by name, for the samplers that train parameters (``MAP``, the psi of ``OHSMC``/``SGSMC``)."""
from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import Tensor
from torch.optim import optimizer as torch_optimizer  # the global step hooks torch's step wrapper runs

from lit_bayes.grad_mode import without_grad
from lit_bayes.validation import check_positive

__all__ = ["OPTIMIZERS", "DirectFusedAdam", "check_optimizer_arguments", "check_optimizer_name", "make_optimizer"]

# every torch optimiser that steps without a closure, by lower-case class name ("adam", "sgd", "adamw", ...)
OPTIMIZERS = {
    name.lower(): cls for name, cls in vars(torch.optim).items()
    if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer) and name not in ("Optimizer", "LBFGS")
}

FUSED_BY_DEFAULT = ("adam", "adamw", "sgd")  # with fused CPU and CUDA kernels (tested on the pinned torch)
FUSED_DEVICES = ("cpu", "cuda")


def _adam_step(optimizer: torch.optim.Adam, closure=None):
    """torch's Adam step without torch's step wrapper (which, once any plain Adam exists, wraps it): the hooks
    and the profiler range are :class:`DirectFusedAdam`'s to run."""
    step = torch.optim.Adam.step
    return (step.__wrapped__ if getattr(step, "hooked", False) else step)(optimizer, closure)


class DirectFusedAdam(torch.optim.Adam):
    """``torch.optim.Adam(fused=True)`` whose steps call the fused kernel directly.

    On a small network torch's step costs ~15x its kernel in Python (grouping the tensors by device and
    dtype, the compile guards): ~200 against ~13 us for the 2,326 psi parameters of the moons pBNN,
    about a tenth of an OHSMC step (issue 26). This step takes ~33 us (torch's step with its wrapper kept
    ~75 us in the same run, one thread, AMD EPYC Zen3). A ``closure`` (Lightning passes one
    on every step, its hooks inside) is called first, under grad mode, as torch does. It does what torch's
    fused path does, one ``step += 1`` and one ``torch._fused_adam_`` (``_fused_adamw_`` with decoupled weight
    decay) per group, whenever that path applies: every group fused, real, without amsgrad, ``capturable``,
    ``differentiable`` or a tensor learning rate, no GradScaler attached, and the parameters with a
    gradient holding their state (from the first step on) on one device in one dtype. Otherwise
    (the first step, which creates the state, and every other case) it is torch's own step. Same
    state, ``state_dict`` and update as ``torch.optim.Adam``.

    Two costs of torch's step are cut further (issue 26; 2026-12-04, interleaved with the code before in one
    process, the OHSMC step at J = 100 took 0.93-0.95x as long in float64, 0.94x in float32, the same values):

    - torch wraps every optimiser's ``step`` in a profiler range and its step hooks (~30-50 us here). This step
      is marked as wrapped already and runs that wrapper itself, :meth:`torch.optim.Optimizer.profile_hook_step`,
      whenever it has something to do: a step pre- or post-hook registered (on this optimiser or globally), or
      the autograd profiler on.
    - A group's step counters are held as views of one tensor (made so at the first direct step, and again
      after ``load_state_dict`` replaced them), so that one ``add_`` counts a step for all of them where every
      parameter of the group has a gradient (``_foreach_add_`` on 0-d CPU tensors: ~14 against ~3 us).
    """

    def __init__(self, params, **options) -> None:
        super().__init__(params, **{"fused": True, **options})
        self._counters: dict[int, tuple[Tensor, list[Tensor]]] = {}  # id(group): (counters, their views)

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self.__dict__.setdefault("_counters", {})

    def step(self, closure=None):
        if (self._optimizer_step_pre_hooks or self._optimizer_step_post_hooks or torch.autograd._profiler_enabled()
                or torch_optimizer._global_optimizer_pre_hooks or torch_optimizer._global_optimizer_post_hooks):
            return self._hooked_step(closure)
        return self._direct_step(closure)

    step.hooked = True  # torch's Optimizer.__init__ wraps a step not marked so

    @without_grad
    def _direct_step(self, closure=None):
        if getattr(self, "grad_scale", None) is not None or getattr(self, "found_inf", None) is not None:
            return _adam_step(self, closure)
        loss = None
        if closure is not None:  # Lightning always passes one (its hooks run in it): the gradients come after it
            with torch.enable_grad():
                loss = closure()
        batches = [self._direct_batch(group) for group in self.param_groups]
        if any(batch is None for batch in batches):
            _adam_step(self)
            return loss
        for group, (params, grads, exp_avgs, exp_avg_sqs, steps) in zip(self.param_groups, batches):
            if not params:
                continue
            beta1, beta2 = group["betas"]
            steps = self._count_step(group, steps)
            kernel = torch._fused_adamw_ if group.get("decoupled_weight_decay") else torch._fused_adam_
            kernel(params, grads, exp_avgs, exp_avg_sqs, [], steps, amsgrad=False, lr=group["lr"], beta1=beta1,
                   beta2=beta2, weight_decay=group["weight_decay"], eps=group["eps"], maximize=group["maximize"],
                   grad_scale=None, found_inf=None)
        return loss

    _hooked_step = torch.optim.Optimizer.profile_hook_step(_direct_step)

    def _count_step(self, group: dict, steps: list[Tensor]) -> list[Tensor]:
        """``step += 1`` for the counters ``steps`` of ``group``'s parameters with a gradient (in order); returns
        them, as views of one tensor where they are all of the group's (see the class docstring)."""
        shared = self._counters.get(id(group))
        if shared is None or len(steps) != len(shared[1]) or not all(map(operator.is_, steps, shared[1])):
            if len(steps) != len(group["params"]):  # a parameter without gradient keeps its count
                torch._foreach_add_(steps, 1)
                return steps
            counters = torch.stack(steps)
            shared = self._counters[id(group)] = counters, list(counters.unbind())
            for p, view in zip(group["params"], shared[1]):
                self.state[p]["step"] = view
        shared[0].add_(1)
        return shared[1]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """torch's ``zero_grad``; with ``set_to_none`` (the default) a plain loop, without the profiler range
        and compile guard torch wraps it in (~35 us of an OHSMC step at J = 100)."""
        if not set_to_none:
            return super().zero_grad(set_to_none)
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None
        return None

    def _direct_batch(self, group: dict) -> tuple[list[Tensor], ...] | None:
        """The tensor lists of ``group``'s fused kernel call, or None when torch's step must run."""
        if (not group["fused"] or group["amsgrad"] or group["capturable"] or group["differentiable"]
                or isinstance(group["lr"], Tensor) or isinstance(group["betas"][0], Tensor)):
            return None
        params, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
        device = dtype = None  # those of the group's first parameter, read once
        for p in group["params"]:
            grad = p.grad
            if grad is None:
                continue
            if dtype is None:
                first = group["params"][0]
                device, dtype = first.device, first.dtype
            state = self.state.get(p)
            if not state or dtype.is_complex or grad.is_sparse or p.dtype != dtype or p.device != device:
                return None
            params.append(p)
            grads.append(grad)
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            steps.append(state["step"])
        return params, grads, exp_avgs, exp_avg_sqs, steps


def check_optimizer_name(name: str) -> None:
    """Raise ``ValueError`` naming the ``optimizer`` argument unless ``name`` is in :data:`OPTIMIZERS`."""
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZERS)}, got {name!r}")


def check_optimizer_arguments(
    optimizer: str, lr: float, optimizer_options: Mapping[str, Any] | None
) -> tuple[str, float, dict[str, Any]]:
    """A module's ``optimizer``, ``lr`` and ``optimizer_options`` arguments checked (``ValueError`` naming the
    argument) and returned as the name, ``float(lr)`` and a copy of the options."""
    check_optimizer_name(optimizer)
    if optimizer_options is not None and not isinstance(optimizer_options, Mapping):
        raise ValueError(f"optimizer_options must be a dict of {optimizer}'s arguments, got {optimizer_options!r}")
    return optimizer, check_positive("lr", lr), dict(optimizer_options or {})


def make_optimizer(name: str, params: Iterable[Tensor], lr: float, options: Mapping[str, Any] | None = None):
    """``OPTIMIZERS[name](params, lr=lr, **options)``.

    For Adam, AdamW and SGD, when ``options`` choose neither ``fused`` nor ``foreach``, torch's
    fused implementation is used for floating-point parameters on CPU or CUDA: one kernel for
    all parameters instead of a list of ``foreach`` calls (Adam on a small network: ~3x faster
    per step on CPU). It computes the same update. Fused Adam is a :class:`DirectFusedAdam`,
    which calls that kernel without torch's Python around it.
    """
    check_optimizer_name(name)
    cls, params, options = OPTIMIZERS[name], list(params), dict(options or {})
    if (name in FUSED_BY_DEFAULT and "fused" not in options and "foreach" not in options
            and params and all(p.is_floating_point() and p.device.type in FUSED_DEVICES for p in params)):
        options["fused"] = True
    if name == "adam" and options.get("fused"):
        cls = DirectFusedAdam
    return cls(params, lr=lr, **options)
