"""Launchers: the local multi-process launcher with emulated device kinds.

(Named `launcher` so that `shoal.launch`, the function job files call, stays a function.)
"""
