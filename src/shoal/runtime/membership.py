"""Group membership across generations: who trains together, and a fresh group for each change.

A generation is one fixed set of workers with one process group. Any change of membership
ends it: a worker that fails (its peers' collective raises), leaves after a notice, or joins.
The survivors and newcomers then meet in the next generation with new ranks.

Under `shoal run` the launcher (the controller) hosts a TCPStore on 127.0.0.1 and decides each
generation's members; workers read it from the store:
- `members/<g>`: JSON {"ids", "kinds", "priors"} published by the controller;
- `arrived/<g>/<id>`: a worker is waiting for generation g;
- `regroup/<g>`: the controller asks generation g to stop at the next step boundary (a join);
- `ready/<id>`: a new worker has built its model and can be admitted.
Each generation's process group lives under its own store prefix, so old and new never mix.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist


class PeerFailure(RuntimeError):
    """A collective failed because a member of the group died or vanished."""


@contextlib.contextmanager
def peer_failures():
    """Turn a collective's error into PeerFailure: gloo and nccl report a dead or vanished peer
    as a RuntimeError, raised where the collective is issued or where it is waited on."""
    try:
        yield
    except RuntimeError as exc:
        raise PeerFailure(str(exc).splitlines()[0] if str(exc) else repr(exc)) from exc


def collective(fn, *args, **kwargs) -> None:
    """Run a torch.distributed collective; a dead or vanished peer becomes PeerFailure."""
    with peer_failures():
        fn(*args, **kwargs)


@dataclass(frozen=True)
class Group:
    generation: int
    rank: int
    world_size: int
    ids: tuple[str, ...]
    kinds: tuple[str, ...]
    priors: tuple[float, ...]


def _timeout(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


class StoreMembership:
    """A worker's side of the controller's rendezvous protocol."""

    def __init__(
        self,
        worker_id: str,
        host: str,
        port: int,
        backend: str,
        op_timeout_s: float = 30.0,
    ):
        self.id, self.backend = worker_id, backend
        self.store = dist.TCPStore(host, port, is_master=False, timeout=_timeout(3600))
        self.op_timeout_s = op_timeout_s
        self.generation = int(os.environ.get("SHOAL_GENERATION", "0"))

    def announce_ready(self) -> None:
        self.store.set(f"ready/{self.id}", "1")

    def join(self) -> Group | None:
        """Wait for the next generation that includes this worker; None if the run is over."""
        while True:
            g = self.generation
            self.store.set(f"arrived/{g}/{self.id}", "1")
            self.store.wait([f"members/{g}"], _timeout(3600))  # explicit: init lowers the default
            spec = json.loads(self.store.get(f"members/{g}"))
            if spec.get("done"):
                return None
            if self.id not in spec["ids"]:
                self.generation += 1  # not admitted this time: wait for a later generation
                continue
            rank, world = spec["ids"].index(self.id), len(spec["ids"])
            try:
                self._init_group(g, rank, world)
            except RuntimeError:  # a member died while the group was forming
                self.generation += 1
                continue
            return Group(
                g, rank, world, tuple(spec["ids"]), tuple(spec["kinds"]), tuple(spec["priors"])
            )

    def _init_group(self, g: int, rank: int, world: int) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
        if world == 1:
            return
        # torch names the default group after a global counter that a failed init advances
        # and nothing rewinds; members must agree on the name, so every generation starts at 0
        dist.distributed_c10d._world.group_count = 0
        store = dist.PrefixStore(f"pg/{g}", self.store)
        dist.init_process_group(
            self.backend,
            store=store,
            rank=rank,
            world_size=world,
            timeout=_timeout(self.op_timeout_s),  # also bounds a hung peer's collective
        )

    def leave_generation(self) -> None:
        """This generation is over (failure or change): the next one is g + 1."""
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except RuntimeError:
                pass
        self.generation += 1

    def regroup_requested(self) -> bool:
        return self.store.check([f"regroup/{self.generation}"])

    def announce_left(self, steps_done: int) -> None:
        """A graceful leave: tell the controller the step boundary this worker left at."""
        self.store.set(f"left/{self.id}", str(steps_done))


def broadcast_bytes(data: bytes | None, src: int, device: torch.device) -> bytes:
    """Broadcast a byte string from rank `src` to every member (None elsewhere)."""
    size = torch.tensor([len(data) if data is not None else 0], dtype=torch.int64, device=device)
    collective(dist.broadcast, size, src)
    buf = torch.empty(int(size), dtype=torch.uint8, device=device)
    if data is not None:
        buf.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    collective(dist.broadcast, buf, src)
    return buf.cpu().numpy().tobytes()


def host_store(host: str = "127.0.0.1") -> tuple[dist.TCPStore, int, socket.socket]:
    """The rendezvous store a controller hosts, listening on `host` only.

    TCPStore alone listens on every interface, so the socket is bound here and handed over;
    the caller keeps the returned socket object alive as long as the store.
    """
    sock = socket.socket()
    sock.bind((host, 0))
    sock.listen(512)
    port = sock.getsockname()[1]
    store = dist.TCPStore(
        host,
        port,
        is_master=True,
        wait_for_workers=False,
        timeout=_timeout(3600),
        master_listen_fd=sock.fileno(),
    )
    return store, port, sock
