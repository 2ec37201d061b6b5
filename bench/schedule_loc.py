"""Lines of schedule code per library model (the analogue of Slapo's Table 4); prints JSON.

    .venv/bin/python bench/schedule_loc.py

Counts the body of each `shoal.schedule.model_schedule.<model>.schedule` function: physical
source lines of its statements, without the docstring, blank lines or comments. `lines` skips
`for` header lines, the rule Slapo's artifact used for its 10-21 figures; `lines_with_for` counts
them too. Both include the `if` lines that switch fusion, tensor parallelism and checkpointing.
The optional vocabulary-parallel embedding and LM head (`model_schedule/vocab.py`, used by
`gpt2` and `llama` with `vocab_parallel=True`) is counted on its own line.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import json
import textwrap

MODELS = ("gpt2", "bert", "llama", "wideresnet")


def count(func) -> dict[str, int]:
    src = textwrap.dedent(inspect.getsource(func))
    fn = ast.parse(src).body[0]
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    lines = src.splitlines()
    code, for_lines = set(), set()
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.stmt):
                end = node.end_lineno if not hasattr(node, "body") else node.body[0].lineno - 1
                for ln in range(node.lineno, end + 1):
                    text = lines[ln - 1].strip()
                    if text and not text.startswith("#"):
                        code.add(ln)
                if isinstance(node, ast.For):
                    for_lines.update(range(node.lineno, node.body[0].lineno))
    return {"lines": len(code - for_lines), "lines_with_for": len(code)}


def main() -> int:
    out = {}
    for name in MODELS:
        module = importlib.import_module(f"shoal.schedule.model_schedule.{name}")
        out[name] = count(module.schedule)
    # The optional vocabulary-parallel embedding + LM head (gpt2 and llama), counted apart.
    vocab = importlib.import_module("shoal.schedule.model_schedule.vocab")
    out["vocab_parallel_addon"] = count(vocab.shard_vocab)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    ).parse_args()
    raise SystemExit(main())
