"""``python -m lit_structattn.cli``: the ``structattn`` command."""

from .command import main

main()
