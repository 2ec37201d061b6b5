"""`slapo.utils`: the helper modules Slapo programs import by path.

Kept only because Slapo's programs import `slapo.utils.common.get_hooks`,
`slapo.utils.report.report_memory` and `slapo.utils.mapping`; each submodule is a thin public
face for code that lives where it belongs (`hooks.py`, `find.py`).
"""

from . import common, mapping, report

__all__ = ["common", "mapping", "report"]
