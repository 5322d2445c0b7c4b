"""lit_structattn: structured and constrained attention for NLP, in PyTorch Lightning."""

__version__ = "0.1.0"
