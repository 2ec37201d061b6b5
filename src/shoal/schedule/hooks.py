"""Moving module hooks when a schedule swaps one module for another.

PyTorch 2.x keeps hooks in several dicts (`_forward_pre_hooks`, `_forward_hooks`, their
``*_with_kwargs`` / ``always_called`` flags, `_backward_hooks`, `_backward_pre_hooks` and the
`_is_full_backward_hook` flag). Slapo copied only the first three, which silently drops full
backward hooks; here every one of them travels with the hook it describes.
"""

from __future__ import annotations

from collections.abc import Iterable

from torch import nn

HOOK_KINDS = ("fwd_pre", "fwd_post", "bwd_post")

# hook kind -> (hook dict, companion flag dicts keyed by the same handle id)
_DICTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "fwd_pre": ("_forward_pre_hooks", ("_forward_pre_hooks_with_kwargs",)),
    "fwd_post": (
        "_forward_hooks",
        ("_forward_hooks_with_kwargs", "_forward_hooks_always_called"),
    ),
    "bwd_post": ("_backward_hooks", ()),
    "bwd_pre": ("_backward_pre_hooks", ()),
}


def get_hooks(mod: nn.Module) -> dict[str, list]:
    """Return the hooks registered on `mod`, by kind (``fwd_pre``, ``fwd_post``, ``bwd_post``)."""
    out: dict[str, list] = {}
    for kind, (attr, _) in _DICTS.items():
        out[kind] = list(getattr(mod, attr, {}).values())
    return out


def has_hooks(mod: nn.Module, kinds: Iterable[str] = tuple(_DICTS)) -> bool:
    """Whether `mod` has any hook of the given kinds."""
    return any(len(getattr(mod, _DICTS[k][0], {})) > 0 for k in kinds)


def transfer_hooks(old: nn.Module, new: nn.Module, kinds: Iterable[str] = tuple(_DICTS)) -> None:
    """Move the hooks of the given kinds from `old` to `new` (flags included)."""
    for kind in kinds:
        attr, flags = _DICTS[kind]
        src = getattr(old, attr, None)
        if not src:
            continue
        dst = getattr(new, attr)
        for key, hook in list(src.items()):
            dst[key] = hook
            for flag in flags:
                flag_src = getattr(old, flag, {})
                if key in flag_src:
                    getattr(new, flag)[key] = flag_src[key]
                    del flag_src[key]
            del src[key]
        if kind in ("bwd_post", "bwd_pre") and getattr(old, "_is_full_backward_hook", None):
            new._is_full_backward_hook = old._is_full_backward_hook
