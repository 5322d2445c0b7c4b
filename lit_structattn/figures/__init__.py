"""Figures of attention: matplotlib heatmaps, raindrop plots and parses (:mod:`.plots`, also
used by the notebook), and the TensorBoard callbacks that log them (:mod:`.callbacks`)."""
