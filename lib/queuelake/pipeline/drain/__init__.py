"""Drain queue tables into the ``messages`` journal, exactly once, with durable claims.

Per batch, a worker:
1. receives the batch (``DELETE ... RETURNING``, transaction left open) and builds its journal rows;
2. stages them: Parquet files written into the journal's folder, not yet in the Delta log;
3. inserts a claim record naming those files in the DELETE's transaction, and commits: from this
   instant the rows are gone from the queue and their content is durable in the lake;
4. hands the claimed batch to the run's journal committer, which commits the staged files to the
   Delta log under the worker's application transaction (app id, version), together with whatever
   other workers and queues claimed meanwhile (one Delta commit, every app id's version in it), then
   clears the claims. Step 4 runs on the committer's thread while the worker already receives and
   builds the next batch: the claim is durable before the hand-over, so overlapping them changes no
   guarantee (at most two claims are open per worker).

A kill before 3 rolls the DELETE back (the staged files become orphans for vacuum); a kill after it
leaves a claim that the next drain of the queue resolves before it receives anything: committed
already (the app transaction says so) means clear it, else commit its files, then clear it. No row
the journal holds is ever receivable again, and no row leaves a queue without its content stored.
Memory: a worker holds one batch, whatever the backlog.

The modules, top down:
- ``run``: the command: queues drained in parallel within ``drain.max_connections``, the summary,
  the ``runs`` rows
- ``backlog``: every queue's depth estimated up front, workers by backlog, the connection budget
- ``queue_drain``: one queue under its drain lock: resolve claims, start the workers, the outcome
- ``claims``: the claims that killed drains left, resolved before anything is received
- ``worker``: one worker's loop: receive, build, stage, claim, hand over to the committer
- ``committer``: the run's journal committer: group Delta commits of claimed batches, then their
  claims cleared
- ``state``: what a queue's workers share (settings, lake, budget, result, committed claims)
- ``budget``, ``result``, ``progress``: the shared budget, one queue's result, the progress lines
"""
