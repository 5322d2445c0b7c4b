"""The ``structattn`` command (:mod:`.command`), experiments by name (:mod:`.experiments`) and
predictions on raw text files (:mod:`.predict`)."""

from .command import main

__all__ = ["main"]
