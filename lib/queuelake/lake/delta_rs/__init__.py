"""The delta-rs engine (``engine.DeltaRsEngine``) and its internals: the journal's own Delta log machinery
(staged commits, the append log followed between runs, checkpoints, the log's head)."""
