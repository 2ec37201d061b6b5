"""The run's records on disk: the lines of `metrics.jsonl` and the `result.json` summary.

This package owns their schema; every writer (the step log of rank 0, the supervisor's membership
events) and every reader (the supervisor's progress, `shoal report`) goes through its types.
`metrics.jsonl` holds one JSON object per line with a `"kind"`: `"step"` (one completed training
step, with each worker's share) and `"membership"` (join, leave, fail, notice, recover), whose
types are in `training`, and, for a run buying its servers from a provider, `"lease"` (a server
opened or closed) and `"cost"` (the spend so far at each scaler decision), in `cost`. `files`
names the two files, holds the `result.json` summary and reads both; `fields` is the typed access
to one JSON object that every record is read through. Only the keys that identify a record are
required; the rest are optional so that older or partial runs still load, and `to_json` leaves
out what is unknown. Pure: no torch.
"""
