"""What every Trainer of the project gets: the LightningCLI subclass (:mod:`.lightning_cli`),
checkpoints written whole and read as data (:mod:`.checkpoints`, :mod:`.cache_records`), fits
that stop cleanly and resume exactly (:mod:`.interruption`), run folders no other run writes
into (:mod:`.folders`), a fit that stops at a non-finite loss (:mod:`.training_guards`), the
steady allocator (:mod:`.allocator`), the callbacks any run may take (:mod:`.callbacks`), what
a run prints while it runs (:mod:`.progress`) and what it leaves out (:mod:`.quiet`)."""
