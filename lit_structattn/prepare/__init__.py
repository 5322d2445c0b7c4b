"""Side models trained once, before a task's fit, and cached: the fertility predictor of the
PREDICTED upper bounds (:mod:`.fertility`) and the supervised dependency parser of the NLI
experiments (:mod:`.parser`)."""
