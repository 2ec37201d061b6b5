"""Transient cluster specs: servers of a kind, in a region, on a pricing tier, at a price.

A spec is a list of items separated by commas or newlines (a file may also hold `#` comments):

    [N x]KIND[@REGION][:TIER[=USD_PER_HOUR]]

KIND is a GPU kind of the device table (`shoal.perf.devices`) or `ps` for a parameter server;
REGION a GCE region (or zone, whose region is taken) where the transient-server paper ran or
measured lifetimes; TIER `spot` or `on_demand` (default on_demand); the price defaults to the
device table's for the kind and tier (the paper's Table I; `ps`: 4 vCPU, 0.143 / 0.041 $/h).
KIND, REGION and TIER are in any case: `2xK80@US-EAST1:SPOT` is `2xk80@us-east1:spot`.
Example: `4xk80@us-east1:spot,1xv100@us-west1,ps@us-east1`. The first GPU worker listed is the
chief (the paper's master, which checkpoints). With no `ps` item one on-demand parameter server
runs in the chief's region; `0xps` means none, for one worker that updates its own parameters
(the paper's single-GPU runs).
Bad input raises `UserError` naming the item, and the file and line when it came from a file.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from shoal.errors import UserError
from shoal.perf.devices import TIERS, load_devices

# GCE regions in the paper's training runs and lifetime measurements
KNOWN_REGIONS = (
    "us-east1",
    "us-central1",
    "us-west1",
    "europe-west1",
    "europe-west4",
    "asia-east1",
)
DEFAULT_REGION = "us-east1"
PS_KIND = "ps"
MAX_SERVERS = 10_000  # a cluster's servers; the model was measured on up to 8 workers, 2 servers
# 4-vCPU parameter server VM, $/h (paper Table I)
PS_PRICES_USD_PER_HOUR = {"on_demand": 0.143, "spot": 0.041}
KindCheck = Callable[[str], None]  # a worker kind -> None, or UserError if it cannot be used

_ITEM = re.compile(
    r"(?:(?P<count>[0-9]+)\s*[x*]\s*)?(?P<kind>[A-Za-z0-9_]+)"
    r"(?:@(?P<region>[A-Za-z0-9-]+))?"
    r"(?::(?P<tier>[A-Za-z_-]+)(?:=(?P<price>[0-9.]+))?)?"
)


@dataclass(frozen=True)
class Server:
    kind: str  # a GPU kind, or "ps"
    region: str
    tier: str
    price_usd_per_hour: float


@dataclass(frozen=True)
class TransientCluster:
    workers: tuple[Server, ...]  # workers[0] is the chief
    servers: tuple[Server, ...]  # parameter servers

    @property
    def cross_region_workers(self) -> int:
        """Workers outside every parameter server's region (their latency is not modelled)."""
        regions = {s.region for s in self.servers}
        if not regions:
            return 0
        return sum(w.region not in regions for w in self.workers)


def _region(name: str | None) -> str:
    if name is None:
        return DEFAULT_REGION
    region = re.sub(r"-[a-z]$", "", name.lower())  # a zone such as us-east1-c
    if region not in KNOWN_REGIONS:
        raise UserError(f"unknown region {name!r} (known: {', '.join(KNOWN_REGIONS)})")
    return region


def _price(text: str) -> float:
    """A price in USD per hour (the item's pattern lets `1.2.3` and `.` through, and digits
    past a float's range, which float() reads as inf: an inf cost)."""
    try:
        price = float(text)
    except ValueError:
        price = math.inf
    if not math.isfinite(price):
        raise UserError(f"bad price {_short(text)!r} (USD per hour, e.g. 0.45)")
    return price


def _short(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:37]}..."


def _parse_item(item: str) -> list[Server | None]:
    """The servers an item names; `[None]` for `0xps` (no parameter server)."""
    match = _ITEM.fullmatch(item)
    if not match:
        raise UserError(f"bad cluster item {item!r} (expected [Nx]KIND[@REGION][:TIER[=PRICE]])")
    count = int(match["count"] or 1)
    kind = match["kind"].lower()
    if count == 0 and kind == PS_KIND:
        return [None]
    if not 1 <= count <= MAX_SERVERS:
        raise UserError(f"bad server count in {item!r} (1 to {MAX_SERVERS:,})")
    if kind != PS_KIND:
        kind = load_devices().check(kind)
    tier = (match["tier"] or "on_demand").lower().replace("-", "_")  # as the kind, the region
    if tier not in TIERS:
        raise UserError(f"unknown tier {match['tier']!r} (known: {', '.join(TIERS)})")
    if match["price"] is not None:
        price = _price(match["price"])
    elif kind == PS_KIND:
        price = PS_PRICES_USD_PER_HOUR[tier]
    else:
        price = load_devices().price(kind, tier)
    return [Server(kind, _region(match["region"]), tier, price)] * count


def _add(servers: list[Server | None], item: str, check_kind: KindCheck | None) -> None:
    """Append an item's servers, checking the total as it grows: a file of many big items
    (3,000 lines of 10000xk80) took 500 MB and seconds before one total check at the end.
    `check_kind` (UserError if the caller cannot use a worker kind) runs here, so that its
    error names the item."""
    new = _parse_item(item)
    if check_kind is not None and new[0] is not None and new[0].kind != PS_KIND:
        check_kind(new[0].kind)
    servers += new
    if len(servers) > MAX_SERVERS:
        raise UserError(f"{len(servers):,} servers so far, more than {MAX_SERVERS:,}")


def _build(servers: list[Server | None]) -> TransientCluster:
    workers = tuple(s for s in servers if s is not None and s.kind != PS_KIND)
    ps = tuple(s for s in servers if s is not None and s.kind == PS_KIND)
    no_ps = None in servers
    if not workers:
        raise UserError("a transient cluster needs at least one GPU worker")
    if no_ps and (ps or len(workers) > 1):
        raise UserError("0xps (no parameter server) needs exactly one worker and no ps item")
    if not ps and not no_ps:
        ps = (Server(PS_KIND, workers[0].region, "on_demand", PS_PRICES_USD_PER_HOUR["on_demand"]),)
    return TransientCluster(workers, ps)


def parse_cluster(spec: str, check_kind: KindCheck | None = None) -> TransientCluster:
    """A cluster from an inline spec (`4xk80@us-east1:spot,ps`) or `@FILE` / an existing file;
    `check_kind(kind)` may refuse a worker kind (a UserError naming the item)."""
    if spec.strip() == "@":
        raise UserError("cluster spec '@' names no file (@FILE)")
    path = Path(spec[1:] if spec.startswith("@") else spec)
    if spec.startswith("@") or _is_file(path):
        return load_cluster_file(path, check_kind)
    servers: list[Server | None] = []
    for item in (s.strip() for s in spec.split(",")):
        try:
            _add(servers, item, check_kind)
        except UserError as exc:
            raise UserError(f"cluster spec item {item!r}: {exc}") from None
    return _build(servers)


def _is_file(path: Path) -> bool:
    """Whether an inline spec names a file: a spec longer than a file name may be (255 bytes:
    some 30 items) made `is_file` raise, a traceback instead of the cluster."""
    try:
        return path.is_file()
    except OSError:
        return False


def load_cluster_file(path: Path, check_kind: KindCheck | None = None) -> TransientCluster:
    """A cluster from a file of items, one or more per line; errors name the file and line."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is not data
    except OSError as exc:
        raise UserError(f"cannot read cluster file {str(path)!r}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"cannot read cluster file {str(path)!r}: not UTF-8 text") from None
    servers: list[Server | None] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        for item in (s.strip() for s in line.split("#", 1)[0].split(",")):
            if not item:
                continue
            try:
                _add(servers, item, check_kind)
            except UserError as exc:
                raise UserError(f"{path}:{lineno}: {exc}") from None
    try:
        return _build(servers)
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None
