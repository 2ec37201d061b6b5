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

Under torchrun the agent owns membership (`TorchrunMembership`): a generation is one life of
the process, and a group that ends early is restarted whole, from the spool. Which of the two
a worker has is decided once, from its environment (`connect`); the worker loop asks the
`Membership` what to do and never branches on it.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import json
import math
import os
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

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


def max_over_workers(t: torch.Tensor) -> None:
    """MAX all-reduce of a float tensor in place, a NaN counted as +inf. gloo's MAX compares,
    and a NaN compares false: it survives only from rank 0, so one worker's NaN gradient would
    be seen by some layouts and not others. +inf is ordered the same by every backend."""
    torch.nan_to_num_(t, nan=math.inf, posinf=math.inf, neginf=-math.inf)
    collective(dist.all_reduce, t, op=dist.ReduceOp.MAX)


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


class Membership(Protocol):
    """Who a worker trains with, generation after generation."""

    worker_id: str
    restarted: bool  # an earlier life of this process's group may have left a spool
    may_hold_state: bool  # this run's spool or checkpoints, if any, are ours to resume from

    def announce_ready(self) -> None:
        """The model is built: this worker can be admitted."""

    def join(self) -> Group | None:
        """The next generation with this worker in it; None if the run is over."""

    def regroup_requested(self) -> bool:
        """Whether the controller asks the current generation to stop at a step boundary."""

    def on_lost(self, spool: Callable[[], None], exit_code: int) -> int | None:
        """The generation ended before the last step. Either the caller joins the next one
        (None), or this process spools its state and exits with the code returned."""

    def leave_generation(self) -> None:
        """This generation is over; the next join waits for a later one."""

    def announce_left(self, steps_done: int) -> None:
        """A graceful leave after `steps_done` steps."""


def connect(backend: str, peer_timeout_s: float = 30.0) -> Membership:
    """The membership this process was started under: the controller's store when `shoal run`
    set SHOAL_STORE, torchrun's agent otherwise. `peer_timeout_s` bounds every collective: a
    peer silent that long (stalled, not dead) fails the step like a dead one."""
    address = os.environ.get("SHOAL_STORE")
    if not address:
        return TorchrunMembership(backend)
    host, port = address.rsplit(":", 1)
    wid = os.environ["SHOAL_WORKER_ID"]
    end_with_controller(os.environ.get("SHOAL_CONTROLLER_PID"))
    return StoreMembership(wid, host, int(port), backend, op_timeout_s=peer_timeout_s)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def end_with_controller(controller_pid: str | None) -> None:
    """A `shoal run` worker dies with its controller (its parent process), however that dies:
    the kernel sends it SIGKILL (Linux's parent-death signal). Without it, a SIGKILLed launcher
    left its workers training on unsupervised, and a worker waiting to be admitted blocked on
    the dead store for an hour. Its state is what the last checkpoint or spool holds."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the process runs on, as before
        return
    if controller_pid and os.getppid() != int(controller_pid):
        os._exit(1)  # the controller died before the request above: nobody would tell us


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
        self.id = self.worker_id = worker_id
        self.backend, self.address = backend, (host, port)
        self.store = dist.TCPStore(host, port, is_master=False, timeout=_timeout(3600))
        self.op_timeout_s = op_timeout_s
        self.generation = 0
        # the controller refuses a fresh run in a directory with checkpoints, so any found are
        # this run's; nothing before this process spools
        self.restarted, self.may_hold_state = False, True
        self._watch: RegroupWatch | None = None

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
        if self._watch is not None:
            self._watch.stop()
            self._watch = None
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except RuntimeError:
                pass
        self.generation += 1

    def regroup_requested(self) -> bool:
        """A flag read; the first call of a generation starts its watcher (see RegroupWatch)."""
        if self._watch is None:
            self._watch = RegroupWatch(*self.address, f"regroup/{self.generation}")
        return self._watch.requested.is_set()

    def on_lost(self, spool: Callable[[], None], exit_code: int) -> int | None:
        return None  # the controller publishes the next generation; the state is in the group

    def announce_left(self, steps_done: int) -> None:
        """A graceful leave: tell the controller the step boundary this worker left at."""
        self.store.set(f"left/{self.id}", str(steps_done))


class RegroupWatch:
    """Watches the store for the controller's regroup request, on a daemon thread with its own
    store client, at most every POLL_S: a round trip to the controller, which may sit across a
    slow link, never lengthens a step, and the leader reads a flag between steps. The group acts
    on a yes one step later, since the request itself travels in the next step's collective."""

    POLL_S = 0.1

    def __init__(self, host: str, port: int, key: str):
        self.key, self.requested, self._stop = key, threading.Event(), threading.Event()
        self._thread = threading.Thread(
            target=self._watch, args=(host, port), name="shoal-regroup-watch", daemon=True
        )
        self._thread.start()

    def _watch(self, host: str, port: int) -> None:
        store = dist.TCPStore(host, port, is_master=False, timeout=_timeout(3600))
        while not self._stop.is_set():
            if store.check([self.key]):
                self.requested.set()
                return
            self._stop.wait(self.POLL_S)

    def stop(self) -> None:
        self._stop.set()


class TorchrunMembership:
    """Membership owned by torchrun: one generation per process life, from the environment
    (RANK, WORLD_SIZE, TORCHELASTIC_RESTART_COUNT). A group that ends early is torchrun's to
    restart: this process spools its state and exits."""

    def __init__(self, backend: str):
        self.backend, self.done = backend, False
        self.rank, self.world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        self.generation = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
        # ranks are renumbered at each restart; the host, its agent and the local rank are not,
        # so the metrics can tell which worker was lost or joined across restarts
        local = os.environ.get("LOCAL_RANK", "0")
        self.worker_id = f"{socket.gethostname()}:{os.getppid()}:{local}"
        self.restarted = self.may_hold_state = self.generation > 0

    def announce_ready(self) -> None:
        pass  # torchrun's rendezvous admits the whole group at once

    def join(self) -> Group | None:
        if self.done:
            return None
        self.done = True
        ids: list = [self.worker_id]
        if self.world > 1:
            if not dist.is_initialized():
                dist.init_process_group(self.backend, timeout=_timeout(60))
            ids = [None] * self.world
            with peer_failures():
                dist.all_gather_object(ids, self.worker_id)
        return Group(
            self.generation,
            self.rank,
            self.world,
            tuple(ids),
            ("native",) * self.world,
            (1.0,) * self.world,
        )

    def regroup_requested(self) -> bool:
        return False

    def on_lost(self, spool: Callable[[], None], exit_code: int) -> int | None:
        spool()
        return exit_code

    def leave_generation(self) -> None:
        pass

    def announce_left(self, steps_done: int) -> None:
        pass  # torchrun's agent sees the exit itself


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
