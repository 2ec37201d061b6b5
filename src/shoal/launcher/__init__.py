"""Launching workers: the run spec and its checks, the process supervisor of `shoal run`
(emulated device kinds, injected events) and its membership decisions, and the torchrun entry.

(Named `launcher` so that `shoal.launch`, the function job files call, stays a function.)
"""
