"""The torch runtime: worker loop, exact reduction, state, checkpoints (the only torch.distributed code)."""
