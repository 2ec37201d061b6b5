"""Tensor-parallel sharding: collectives, conjugate autograd ops, layouts and reshard strings."""

from .embedding import gen_embedding_hooks, vocab_parallel_embedding_hooks
from .reshard_ops import reshard_fn
from .sync_ops import (
    all_gather_forward_output,
    all_to_all_forward,
    gather_forward_output,
    reduce_backward_grad,
    reduce_backward_input,
    reduce_forward_output,
    reduce_scatter_forward_output,
    scatter_forward_output,
)

__all__ = [
    "all_gather_forward_output",
    "gather_forward_output",
    "gen_embedding_hooks",
    "vocab_parallel_embedding_hooks",
    "all_to_all_forward",
    "reduce_backward_grad",
    "reduce_backward_input",
    "reduce_forward_output",
    "reduce_scatter_forward_output",
    "reshard_fn",
    "scatter_forward_output",
]
