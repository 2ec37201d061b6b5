"""Optional vocabulary parallelism for the language models' token embedding and LM head.

Kept apart from the per-model schedules (and counted apart in the lines-of-code table): the
embedding's rows are split over the ranks, each rank looks up only the ids it owns and the
partial outputs are summed (`vocab_parallel_embedding_hooks`); the LM head is column-parallel
over the vocabulary, its input gradient all-reduced and its logits all-gathered on the last axis.
The gather's backward keeps this rank's slice of the (replicated) logits gradient, since every
rank computes the same loss from the full logits.
"""

from __future__ import annotations

from typing import Any

from shoal.schedule.sharding import vocab_parallel_embedding_hooks


def shard_vocab(sch: Any, embedding: str, head: str) -> None:
    """Shard `sch[embedding]` (an nn.Embedding) and `sch[head]` (an nn.Linear) by vocabulary."""
    sch[embedding].shard("weight", axis=0)
    pre, post = vocab_parallel_embedding_hooks(sch[embedding])
    sch[embedding].sync("fwd_pre", pre)
    sch[embedding].sync("fwd_post", post)
    sch[head].shard("weight", axis=0)
    sch[head].sync("bwd_post", "all_reduce")
    sch[head].sync("fwd_post", "all_gather", axis=2, tensor_parallel_output_grad=False)
