"""Sites and the compressed exchange between them: the step's collective over slow links.

A site is a set of workers joined by fast links (a node, a cluster); sites are joined by slow
ones. With `--compress` other than none the step's one collective becomes three:
1. inside each site, the usual exact all-reduce of the step's message (fixed-point gradient
   integers, buffers, scalars) over the site's workers;
2. each site decodes its integer sum into its share of the mean gradient (sum over its
   micro-batches / M, the exact engine's arithmetic), adds its residual and compresses it
   (`compress.ErrorFeedback`: exactly k entries per tensor, the residual keeps the rest bit
   for bit). The site leaders all-gather one fixed-size packet each: the site's summed
   scalars, then the packed messages;
3. the leader broadcasts the gathered packets in its site. Every worker sums the scalars
   (int64: exact in any order) and merges the messages in site order (scatter-add of the
   sites' shares: their sum is the mean gradient, as far as it was sent).
Every member of a site computes the same compression from the same bits, so every member
holds the site's residual: the residuals are training state, kept per site (`state_dict`),
rolled back with a step that is redone, and handed to a joiner by `share`.

At keep ratio 1 (a rung of `--compress auto`, or a lone site) the packet holds the site's
whole share in fp32 and the residual is flushed into it; for two sites that puts as many
bytes on a link as a ring all-reduce. With one site the result is bitwise the dense step's.

Which site a worker is in (`site_keys`): `--sites` names worker indices (`shoal run`'s w<i>,
torchrun's rank); a worker the spec does not name (a later join) is in site (index mod the
number of sites). Without `--sites` there is one site under `shoal run` and one site per node
(torchrun agent) under torchrun. Sites merge in the order of their lowest rank.

`--compress auto` feeds `control.bandwidth.BandwidthController` each step with values agreed
by all leaders (the max of their exchange, compute and fixed-cost times, all-gathered), sent
on in the site broadcast: every worker takes the same decision for the next step. Its state
is training state too. Its decisions depend on measured times, so a replay gives the same
digest only with a fixed keep ratio.

`--pipeline` (staleness 1, per step; `sites_pipeline.py`): the step's scalars still cross the
sites synchronously, but its packets are merged at the end of the next step, whose update
they become. The packets not yet applied (`pending`) are each site's training state, beside
its residuals.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from shoal.config import SlowLinkConfig
from shoal.control.bandwidth import (
    BandwidthController,
    LinkSample,
    entries,
    message_bytes,
    parse_compress,
    parse_sites,
)
from shoal.runtime.compress import ErrorFeedback, unpack
from shoal.runtime.membership import (
    Group,
    PeerFailure,
    broadcast_bytes,
    collective,
    peer_failures,
)
from shoal.runtime.sites_pipeline import SitePipeline

SAMPLE_FLOATS = 3  # agreed by the leaders: exchange_s, compute_s, fixed cost (overhead_s)
MIN_SECONDS = 1e-6  # a timing of zero would be refused by the controller


def _sum_int64(chunks: list[torch.Tensor]) -> torch.Tensor:
    """The sites' int64 scalars (raw bytes, one chunk per site), summed in site order."""
    summed = chunks[0].clone().view(torch.int64)
    for chunk in chunks[1:]:
        summed += chunk.clone().view(torch.int64)
    return summed


@dataclass(frozen=True)
class Site:
    key: str  # stable across generations: the residuals are kept under it
    ranks: tuple[int, ...]  # in this generation; ranks[0] is the leader


def site_keys(ids: tuple[str, ...], spec: str | None) -> list[str]:
    """The site of each worker of a group, by rank (see the module's docstring)."""
    if spec is None:  # torchrun ids are host:agent_pid:local_rank; shoal run's are w<i>
        return [i.rsplit(":", 1)[0] if i.count(":") == 2 else "0" for i in ids]
    named = len([w for w in spec.replace("/", ",").split(",") if w.strip()])
    sites = parse_sites(spec, named)
    site_of = {w: s for s, members in enumerate(sites) for w in members}
    keys = []
    for rank, wid in enumerate(ids):
        index = int(wid[1:]) if wid[:1] == "w" and wid[1:].isdigit() else rank
        keys.append(str(site_of.get(index, index % len(sites))))
    return keys


def group_sites(ids: tuple[str, ...], spec: str | None) -> tuple[Site, ...]:
    by_key: dict[str, list[int]] = {}
    for rank, key in enumerate(site_keys(ids, spec)):
        by_key.setdefault(key, []).append(rank)  # insertion order: by lowest rank
    return tuple(Site(key, tuple(ranks)) for key, ranks in by_key.items())


def _world_timeout():
    """The group's own collective timeout (the peer timeout), for the subgroups: by default
    torch gives a new group 30 minutes, and a peer lost inside a site or between leaders
    must fail the step as soon as it would in the whole group. None (torch's default) where
    this torch does not expose it."""
    try:
        backend = dist.get_backend()
        device = torch.device("cuda" if backend == "nccl" else "cpu")
        return dist.group.WORLD._get_backend(device).options._timeout
    except (AttributeError, RuntimeError, ValueError):
        return None


class SiteExchange:
    """The hierarchical compressed exchange of one worker (see the module's docstring)."""

    def __init__(self, params: list[torch.nn.Parameter], link: SlowLinkConfig):
        self.mode, self.fixed_keep = parse_compress(link.compress)
        # --pipeline (staleness 1, see the module docstring); None: a step merges its own packets
        self.pipeline = SitePipeline(self) if link.pipeline else None
        # by site key: the packets the site sent last and whose merge is not applied yet (keep
        # ratio, uint8 payload); training state, kept and handed over with the residuals
        self.pending: dict[str, tuple[float, torch.Tensor]] = {}
        self.pipe_group = None  # leaders' group for the pipeline's gather, apart from the scalars'
        self.spec = link.sites
        self.selector = "topk" if self.mode == "topk" else "block"
        self.sizes = [p.numel() for p in params]
        self.names = [str(i) for i in range(len(params))]
        self.feedback: dict[str, ErrorFeedback] = {}  # by site key
        self.tags: dict[str, int] = {}  # by site key: the step its residuals feed into
        # residuals this worker computed, kept out of a step's rollback: a worker whose step
        # failed after its site compressed may be the only one left holding what its site
        # sent (`share` takes the newest that matches the group's step)
        self.kept: dict[str, tuple[int, dict]] = {}
        self.controller = BandwidthController(self.sizes, 1) if self.mode == "auto" else None
        self.overhead_s = 0.0  # the last agreement gather's time: the next fixed-cost sample
        self.record: dict | None = None  # the last exchange's link figures (step lines)
        # entries the last merged update touched, flat bool (None: every entry): the lazy
        # optimizer step changes only these (sparse_optim.py)
        self.touched: torch.Tensor | None = None
        self.regroup(Group(0, 0, 1, ("w0",), ("native",), (1.0,)))

    def regroup(self, group: Group) -> None:
        """Sites of the new group; their process groups are made at the first exchange."""
        self.sites = group_sites(group.ids, self.spec)
        self.rank, self.world_size = group.rank, group.world_size
        self.site = next(s for s in self.sites if group.rank in s.ranks)
        self.site_group = self.leaders = self.pipe_group = None
        self._groups_made = group.world_size == 1
        if self.pipeline:  # a new group redoes the pending exchange synchronously
            self.pipeline.drop_in_flight()
        if self.controller is not None:
            self.controller.num_sites = len(self.sites)

    def _make_groups(self) -> None:
        """Every rank creates every site's group and the leaders', in the same order, as
        torch.distributed requires. Inside the step, so that a member lost meanwhile is a
        peer failure the step recovers from, not an error in the regroup."""
        timeout = _world_timeout()
        with peer_failures():
            for site in self.sites:
                made = (
                    dist.new_group(list(site.ranks), timeout=timeout)
                    if len(site.ranks) > 1
                    else None
                )
                if site is self.site:
                    self.site_group = made
            if len(self.sites) > 1:
                made = dist.new_group([s.ranks[0] for s in self.sites], timeout=timeout)
                self.leaders = made if self.rank == self.site.ranks[0] else None
                if self.pipeline:  # so that a step's scalars never queue behind the packets
                    made = dist.new_group([s.ranks[0] for s in self.sites], timeout=timeout)
                    self.pipe_group = made if self.rank == self.site.ranks[0] else None
        self._groups_made = True

    def keep_ratio(self) -> float:
        if len(self.sites) < 2:
            return 1.0  # nothing crosses a link: send everything, residual included
        return self.controller.keep_ratio if self.controller else self.fixed_keep

    # -- the step ------------------------------------------------------------------------------
    def exchange(
        self, message: torch.Tensor, unit: torch.Tensor, compute_s: float, step: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`message`: this worker's int64 step message (gradient integers, then the rest);
        `unit`: the grid's per-entry 2**(E-P)/M; `step`: the step computed. Returns (the
        merged mean gradient, fp32, or None when pipelined (`pipeline.advance` gives it); the
        whole group's summed rest of the message, int64)."""
        numel = unit.numel()
        if not self._groups_made:
            self._make_groups()
        if self.site_group is not None:
            self.site_collective(dist.all_reduce, message, group=self.site_group)
        # the exact engine's decode, on the site's integers: the site's share of the mean
        share = message[:numel].to(torch.float64).mul_(unit).to(torch.float32)
        keep, key = self.keep_ratio(), self.site.key
        feedback = self.feedback.setdefault(key, ErrorFeedback(keep, self.selector))
        feedback.keep_ratio = keep
        self._snapshot = self._site_state(key)
        self._snapshot_tag = self.tags.get(key, step)
        rest = message[numel:].contiguous()
        payload = self._compress(feedback, share, keep)
        self.tags[key] = step + 1
        if self.pipeline:
            self.pipeline.prior = self.pending.get(key)  # applied at this step's end
            self.pending[key] = (keep, payload)
        self.kept[key] = (step + 1, self._site_state(key))
        if self.pipeline:
            return None, _sum_int64(self.pipeline.scalars(rest))
        mine = torch.cat([rest.view(torch.uint8), payload])
        chunks = [mine] if len(self.sites) == 1 else self._gather(mine, keep, compute_s)
        if len(self.sites) == 1:
            self.record = None
        width = rest.numel() * 8
        merged = self.merge([c[width:] for c in chunks], keep, share.device)
        return merged, _sum_int64([c[:width] for c in chunks])

    def site_collective(self, fn, *args, **kwargs) -> None:
        """A collective on a site or leaders' group. On a peer's failure this worker lets go
        of those groups: destroying the default group frees them only once nothing holds them,
        and until then their sockets stay open, so a peer waiting here (a leader whose only
        link to the failed site is this worker) would wait out the whole peer timeout."""
        try:
            collective(fn, *args, **kwargs)
        except PeerFailure:
            self.site_group = self.leaders = None
            raise

    def rollback(self) -> None:
        """The step is computed again (a bound overflowed somewhere): residuals as before."""
        self._load_site(self.site.key, self._snapshot)
        self.tags[self.site.key] = self._snapshot_tag
        self.kept.pop(self.site.key, None)

    def packet_sizes(self, keep: float) -> list[int]:
        if keep >= 1.0:
            return [4 * n for n in self.sizes]
        return [message_bytes(n, entries(n, keep)) for n in self.sizes]

    def _compress(self, feedback: ErrorFeedback, share: torch.Tensor, keep: float) -> torch.Tensor:
        parts, offset = [], 0
        for name, n in zip(self.names, self.sizes, strict=True):
            g = share[offset : offset + n]
            offset += n
            if keep >= 1.0:  # everything is sent: the residual is flushed into it
                old = feedback.residual.pop(name, None)
                acc = g if old is None else g + old
                parts.append(acc.contiguous().view(torch.uint8))
            else:
                parts.append(feedback.compress(name, g))
        return torch.cat(parts)

    def merge(self, payloads: list[torch.Tensor], keep: float, device) -> torch.Tensor:
        """Sum of the sites' shares as sent, in site order (each is already divided by M)."""
        dense = torch.zeros(sum(self.sizes), dtype=torch.float32, device=device)
        offset, at = 0, 0
        self.touched = None if keep >= 1.0 else torch.zeros_like(dense, dtype=torch.bool)
        for n, nbytes in zip(self.sizes, self.packet_sizes(keep), strict=True):
            out = dense[offset : offset + n]
            for i, payload in enumerate(payloads):
                part = payload[at : at + nbytes]
                if keep >= 1.0:
                    values = part.clone().view(torch.float32)
                    out.copy_(values) if i == 0 else out.add_(values)  # 0 + x would lose -0.0
                else:
                    values, idx = unpack(part, n, entries(n, keep))
                    out.index_add_(0, idx, values)
                    self.touched[offset + idx] = True
            offset, at = offset + n, at + nbytes
        return dense

    def _gather(self, mine: torch.Tensor, keep: float, compute_s: float) -> list[torch.Tensor]:
        """Leaders all-gather their packets (timed) and agree on the step's timings; each
        leader broadcasts both in its site."""
        num_sites, device = len(self.sites), mine.device
        packet = torch.empty(num_sites * mine.numel() + 8 * SAMPLE_FLOATS, dtype=torch.uint8)
        packet = packet.to(device)
        if self.leaders is not None:
            chunks = [torch.empty_like(mine) for _ in range(num_sites)]
            t0 = time.perf_counter()
            self.site_collective(dist.all_gather, chunks, mine, group=self.leaders)
            t1 = time.perf_counter()
            sample = torch.tensor([t1 - t0, compute_s, self.overhead_s], dtype=torch.float64)
            samples = [torch.empty_like(sample) for _ in range(num_sites)]
            self.site_collective(dist.all_gather, samples, sample.to(device), group=self.leaders)
            self.overhead_s = time.perf_counter() - t1  # a tiny exchange: the link's fixed cost
            agreed = torch.stack(samples).amax(0)
            packet = torch.cat([*chunks, agreed.view(torch.uint8)])
        if self.site_group is not None:
            self.site_collective(dist.broadcast, packet, self.site.ranks[0], group=self.site_group)
        agreed = packet[-8 * SAMPLE_FLOATS :].clone().view(torch.float64).tolist()
        self._observe(agreed, mine.numel(), keep)
        return list(packet[: -8 * SAMPLE_FLOATS].view(num_sites, -1))

    def _observe(self, agreed: list[float], packet_bytes: int, keep: float) -> None:
        exchange_s, compute_s, overhead_s = (max(t, MIN_SECONDS) for t in agreed)
        sent = (len(self.sites) - 1) * packet_bytes  # a ring all-gather, per site
        self.record = {
            "keep_ratio": keep,
            "sent_bytes": sent,
            "exchange_s": exchange_s,
            "link_mbit_s": 8 * sent / exchange_s / 1e6,
        }
        if self.controller is not None:
            self.controller.observe(LinkSample(sent, exchange_s, compute_s, overhead_s))

    # -- state -----------------------------------------------------------------------------
    def _site_state(self, key: str) -> dict:
        """A site's residuals and thresholds, and (pipelined) its packets not yet applied."""
        state = self.feedback[key].state_dict()
        if key in self.pending:
            keep, payload = self.pending[key]
            state["pending"] = {"keep": keep, "payload": payload}
        return state

    def _load_site(self, key: str, state: dict) -> None:
        self.feedback[key] = ErrorFeedback(1.0, self.selector)
        self.feedback[key].load_state_dict(state)
        self.pending.pop(key, None)
        if "pending" in state:
            self.pending[key] = (float(state["pending"]["keep"]), state["pending"]["payload"])

    def state_dict(self) -> dict:
        feedback = {k: self._site_state(k) for k in self.feedback}
        state: dict = {"feedback": feedback, "tags": dict(self.tags)}
        if self.controller is not None:
            state["controller"] = self.controller.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.feedback, self.pending = {}, {}
        for key, saved in state.get("feedback", {}).items():
            self._load_site(key, saved)
        if self.pipeline:  # a step rolled back, or a state from elsewhere: redo it
            self.pipeline.drop_in_flight()
        self.tags = {k: int(v) for k, v in state.get("tags", {}).items()}
        if self.controller is not None and state.get("controller"):
            self.controller.load_state_dict(state["controller"])

    def _candidate(self, key: str, step: int) -> tuple[int, dict | None]:
        """This worker's newest residuals of site `key` that fit a group at `step`."""
        found = [(t, s) for t, s in [self.kept.get(key, (-1, None))] if t <= step]
        if key in self.feedback and self.tags.get(key, -1) <= step:
            found.append((self.tags[key], self._site_state(key)))
        return max(found, key=lambda c: c[0], default=(-1, None))

    def share(self, device: torch.device, step: int) -> None:
        """After the group's state sync (every member at `step`): each site's members adopt
        that site's newest residuals fitting `step` from the lowest rank holding them (a
        joiner, a worker whose state came from a peer in another site, or one whose last step
        failed lacks them); a site nobody holds starts from zero residuals. Each worker then
        keeps only its own site's."""
        from shoal.runtime.transfer import deserialize, serialize

        chosen: dict[str, tuple[int, dict | None]] = {}
        for site in self.sites:
            tag, state = self._candidate(site.key, step)
            if self.world_size > 1:
                best = torch.tensor([tag], device=device)
                collective(dist.all_reduce, best, op=dist.ReduceOp.MAX)
                holder = torch.tensor([self.rank if tag == int(best) else self.world_size])
                holder = holder.to(device)
                collective(dist.all_reduce, holder, op=dist.ReduceOp.MIN)
                if int(best) >= 0 and int(best) > tag and self.rank in site.ranks:
                    tag, state = int(best), {}  # filled in by the broadcast below
                if int(best) >= 0:
                    lacking = torch.tensor([int(state == {})], device=device)
                    collective(dist.all_reduce, lacking, op=dist.ReduceOp.MAX)
                    if int(lacking):
                        src = int(holder)
                        data = serialize(state) if self.rank == src else None
                        received = broadcast_bytes(data, src, device)
                        if state == {}:
                            state = deserialize(received)
            chosen[site.key] = (tag, state)
        tag, state = chosen[self.site.key]
        self.feedback, self.tags, self.kept, self.pending = {}, {}, {}, {}
        if state:
            self._load_site(self.site.key, state)
            self.tags[self.site.key] = tag
