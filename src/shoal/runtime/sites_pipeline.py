"""`--pipeline`: the sites' compressed exchange at staleness 1 (packets merged a step later).

The step's scalars still cross the sites synchronously (its losses, flags and overflow are its
own decisions), but its packed messages go out in an asynchronous all-gather between the
leaders (gloo `async_op`, on a leaders' group of its own so the next step's scalars never queue
behind them) and are merged at the end of the next step, whose update they become (`advance`).
The messages not yet applied are each site's training state, beside its residuals (the
exchange's `pending`); a new group, a resume or a rollback gathers them again synchronously
(docs/consistency.md states the arithmetic and the membership rule). The rest of the exchange
(the sum inside each site, the compression, the merge, the sites' state) is `sites.py`'s.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from shoal.runtime.membership import peer_failures

if TYPE_CHECKING:
    from shoal.runtime.sites import SiteExchange


def _float_bytes(values: list[float], device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64).view(torch.uint8).to(device)


class SitePipeline:
    """The pipelined part of one worker's `SiteExchange` (see the module's docstring): it uses
    the exchange's sites and their groups, its pending packets, its merge and its link record."""

    def __init__(self, exchange: SiteExchange) -> None:
        self.exchange = exchange
        self.prior: tuple[float, torch.Tensor] | None = None  # pending at the step's start
        self._in_flight: float | None = None  # keep ratio of the gather launched last step
        self._work = self._chunks = None  # that gather's handle and buffers (leaders only)
        self._headers: list[list[float]] = []  # per site: [holds pending packets, their keep]
        self._exposed_s = 0.0

    def scalars(self, rest: torch.Tensor) -> list[torch.Tensor]:
        """The step's scalars cross the links now (overflow, losses and membership flags are
        this step's decisions), with a header per site (whether it holds pending packets, at
        which keep ratio) for a synchronous redo. Returns every site's scalars (raw bytes, in
        site order) for the exchange to sum."""
        width, num_sites = rest.numel() * 8, len(self.exchange.sites)
        prior = self.prior
        header = [float(prior is not None), prior[0] if prior else 0.0]
        mine = torch.cat([rest.view(torch.uint8), _float_bytes(header, rest.device)])
        self._exposed_s = 0.0  # the seconds this step waited on the links (the leaders')
        packet = mine
        if num_sites > 1:
            packet, self._exposed_s = self._gather_packets(mine)
        chunks = packet.view(num_sites, -1)
        self._headers = chunks[:, width:].clone().view(torch.float64).tolist()
        return list(chunks[:, :width])

    def _gather_packets(self, mine: torch.Tensor) -> tuple[torch.Tensor, float]:
        """Every site's `mine`, in site order, on every worker: the leaders all-gather, then
        each leader broadcasts the result in its site. Also the all-gather's seconds (0 off
        the leaders)."""
        ex = self.exchange
        num_sites, seconds = len(ex.sites), 0.0
        if ex.leaders is not None:
            chunks = [torch.empty_like(mine) for _ in range(num_sites)]
            t0 = time.perf_counter()
            ex.site_collective(dist.all_gather, chunks, mine, group=ex.leaders)
            seconds = time.perf_counter() - t0
            packet = torch.cat(chunks)
        else:
            packet = torch.empty(num_sites * mine.numel(), dtype=torch.uint8, device=mine.device)
        if ex.site_group is not None:
            ex.site_collective(dist.broadcast, packet, ex.site.ranks[0], group=ex.site_group)
        return packet, seconds

    def advance(self, device: torch.device) -> torch.Tensor | None:
        """Once the step is usable (no overflow): the merged gradient of the packets that were
        pending at the step's start (None if no site held any: the first step), and this
        step's packets sent on their way, to be merged at the next step's end. The merge
        comes from the gather launched last step when it runs in this group, else from a
        synchronous gather of the pending packets now (after a regroup, a resume, a rollback):
        the same packets, merged in the same site order, give the same bits either way."""
        ex = self.exchange
        t0 = time.perf_counter()
        if len(ex.sites) == 1:
            prior = self.prior
            merged = None if prior is None else ex.merge([prior[1]], prior[0], device)
        elif self._in_flight is not None:
            merged = self._arrive(device)
        else:
            merged = self._redo(device)
        self.drop_in_flight()
        keep, payload = ex.pending[ex.site.key]
        if len(ex.sites) > 1:
            self._in_flight = keep
            if ex.pipe_group is not None:
                self._chunks = [torch.empty_like(payload) for _ in ex.sites]
                with peer_failures():
                    self._work = dist.all_gather(
                        self._chunks, payload, group=ex.pipe_group, async_op=True
                    )
        exposed_s = self._exposed_s + time.perf_counter() - t0
        sent = (len(ex.sites) - 1) * payload.numel()
        ex.record = None if len(ex.sites) == 1 else {
            "keep_ratio": keep,
            "sent_bytes": sent,
            "exchange_s": exposed_s,  # the exposed part only: the rest ran under compute
        }  # fmt: skip
        return merged

    def _arrive(self, device: torch.device) -> torch.Tensor:
        """Wait for the gather launched last step; the leader broadcasts it in its site."""
        ex = self.exchange
        keep, num_sites = self._in_flight, len(ex.sites)
        size = sum(ex.packet_sizes(keep))
        if self._work is not None:
            with peer_failures():
                self._work.wait()
            packet = torch.cat(self._chunks)
        else:
            packet = torch.empty(num_sites * size, dtype=torch.uint8, device=device)
        if ex.site_group is not None:
            ex.site_collective(dist.broadcast, packet, ex.site.ranks[0], group=ex.site_group)
        return ex.merge(list(packet.view(num_sites, -1)), keep, device)

    def _redo(self, device: torch.device) -> torch.Tensor | None:
        """The pending packets gathered synchronously in this group; a site that holds none
        (every member lost, a new site) contributes nothing (see docs/consistency.md)."""
        holding = [i for i, (has, _) in enumerate(self._headers) if has > 0]
        if not holding:
            return None
        keeps = {self._headers[i][1] for i in holding}
        assert len(keeps) == 1, f"pending packets at different keep ratios: {keeps}"
        keep = keeps.pop()
        size, num_sites = sum(self.exchange.packet_sizes(keep)), len(self.exchange.sites)
        prior = self.prior
        mine = prior[1] if prior else torch.zeros(size, dtype=torch.uint8, device=device)
        assert mine.numel() == size
        chunks = self._gather_packets(mine)[0].view(num_sites, -1)
        return self.exchange.merge([chunks[i] for i in holding], keep, device)

    def drop_in_flight(self) -> None:
        """Forget the gather launched last step (its packets stay pending, as state)."""
        self._in_flight, self._work, self._chunks = None, None, None
