"""Neural-network layers built on the math of :mod:`lit_structattn.attention` and
:mod:`lit_structattn.structured`: the ``Attention`` layer and its scorers, sequence encoders,
segmentation / chain-over-facts / syntactic attention, and the one registry of attention layers
by name (:mod:`lit_structattn.layers.registry`)."""
