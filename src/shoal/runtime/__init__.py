"""The torch runtime: worker loop, exact reduction, state and checkpoints.

This is the only package that uses torch.distributed.
"""
