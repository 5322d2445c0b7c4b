"""Learning-rate schedules of the papers that torch has no class for, configurable by
``class_path`` as a task's ``lr_scheduler`` (a
:data:`~lightning.pytorch.cli.LRSchedulerCallable`)::

    lr_scheduler:
      class_path: lit_structattn.tasks.schedules.DecayFrom
      init_args: {start: 9, factor: 0.5}

Torch's own schedules are configured the same way (the memory network's halving every 25
epochs is ``torch.optim.lr_scheduler.StepLR`` with ``step_size: 25, gamma: 0.5``).
"""

from __future__ import annotations

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler


class DecayFrom(LRScheduler):
    """The rate multiplied by ``factor`` at the end of every epoch from epoch ``start`` on
    (epochs counted from 1): epoch ``e`` trains with ``lr * factor ** max(0, e - start)``.

    Kim et al. (2017) halve SGD's rate after every epoch from epoch 9 on (``start=9``: epoch
    10 trains at half the rate); the translation configurations halve Adam's from epoch 5 on.
    Stepped once per epoch (Lightning's default interval).

    Raises:
        ValueError: ``start`` below 1, or ``factor`` outside ``(0, 1]``.
    """

    def __init__(self, optimizer: Optimizer, start: int = 1, factor: float = 0.5,
                 last_epoch: int = -1) -> None:
        if start < 1:
            raise ValueError(f"start is an epoch counted from 1, got {start}")
        if not 0 < factor <= 1:
            raise ValueError(f"factor must be in (0, 1], got {factor}")
        self.start, self.factor = start, factor
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """The rates of the epoch after ``last_epoch`` steps (0 = the first epoch)."""
        return [base * self.factor ** max(0, self.last_epoch + 1 - self.start)
                for base in self.base_lrs]
