"""Our attention in other libraries' models, each integration an optional extra:
:mod:`lit_structattn.integrations.huggingface` (``pip install 'lit_structattn[transformers]'``).
Nothing here is imported by the rest of the package."""
