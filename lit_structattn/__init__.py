"""lit_structattn: structured and constrained attention for NLP, in PyTorch Lightning."""

from .common import renamed

__version__ = "0.1.0"

renamed.install()  # configs and checkpoints saved before the application floor moved still load
