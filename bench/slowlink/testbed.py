"""A slow-link test bed on one machine: N "sites" as network namespaces, each joined to a hub by
a veth pair whose rate is shaped with tc tbf in both directions; the rate can change while a job
runs, and teardown always runs (exceptions, Ctrl-C, SIGTERM).

Topology: a hub namespace holds a bridge; site i's namespace holds `wan0` with address
10.<net>.0.<i+1>/24 and the hub holds its peer `site<i>`, a port of the bridge. The veths are
created inside the namespaces (never in the host's), so the bed adds no address or interface to
the host. The site's `wan0` egress shapes its upload, the hub port's egress its download; a tbf
shapes rate only. This kernel has no netem, so no delay is emulated: figures are rate-only.

Workers run in the sites with `ip netns exec`; torchrun's c10d rendezvous is hosted in site 0
(`--rdzv-conf is_host=...` and `--local-addr` because every namespace has the same hostname),
and gloo is pinned to `wan0` so its traffic crosses the shaped links.

    python bench/slowlink/testbed.py --rates 100,500,1000 --size-mb 8   # root only
prints one JSON line per rate: the shaped rate and the measured all-reduce throughput.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
import uuid

HERE = pathlib.Path(__file__).resolve().parent
PROBE = HERE / "allreduce_probe.py"
CONTROLLER_PROBE = HERE / "controller_probe.py"
PREFIX = "shoal-sl-"  # every namespace the bed creates carries this prefix
WAN = "wan0"
RDZV_PORT = 29400


def bed_available() -> str | None:
    """None when the bed can run here, else the reason it cannot (for a clean skip)."""
    if os.geteuid() != 0:
        return "the slow-link test bed needs root"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2 (ip, tc) is not installed"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"ip netns is unavailable: {probe.stderr.strip()}"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


# The largest packet (a GSO burst, headers counted) a veth of the bed hands its qdisc. It must
# stay below the smallest bucket: tbf splits a packet larger than its bucket when it is queued,
# but a `tc qdisc change` to a smaller bucket leaves the packets already queued as they are, and
# one larger than the new bucket never earns the tokens to leave: the link stalled for good
# (1 Gbit/s -> 100 Mbit/s, a 64 KiB bucket and 64 KiB GSO packets, about one run in 25).
GSO_MAX_BYTES = 32 * 1024


def _burst_bytes(rate_mbit: float) -> int:
    # The bucket holds 64 KiB (two of the largest packets, GSO_MAX_BYTES), or 4 ms of traffic
    # on faster links (tbf's timer must fire on time under load, so a 1 ms bucket lost a quarter
    # of 500 Mbit/s here). A larger bucket lets a whole small message pass at line speed after
    # an idle gap.
    return max(64 * 1024, int(rate_mbit * 1e6 / 8 / 250))


class SlowLinkBed:
    """Create with `with SlowLinkBed(2, rate_mbit=100) as bed:`; torn down on leaving."""

    def __init__(self, num_sites: int, rate_mbit: float, net: int = 77):
        if num_sites < 2:
            raise ValueError(f"a test bed needs >= 2 sites, got {num_sites}")
        self.num_sites = num_sites
        self.tag = uuid.uuid4().hex[:6]
        self.hub = f"{PREFIX}{self.tag}-hub"
        self.sites = [f"{PREFIX}{self.tag}-{i}" for i in range(num_sites)]
        self.addrs = [f"10.{net}.0.{i + 1}" for i in range(num_sites)]
        self.rates = [float(rate_mbit)] * num_sites
        self._made: list[str] = []

    def __enter__(self) -> SlowLinkBed:
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _create(self) -> None:
        for ns in (self.hub, *self.sites):
            _ip("netns", "add", ns)
            self._made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            # Keep TCP's window across the idle gaps between steps' exchanges (each site is
            # a long-lived WAN peer); the default restarts slow start after every compute phase.
            subprocess.run(
                [
                    "ip",
                    "netns",
                    "exec",
                    ns,
                    "sysctl",
                    "-qw",
                    "net.ipv4.tcp_slow_start_after_idle=0",
                ],
                check=True,
                capture_output=True,
            )
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        for i, ns in enumerate(self.sites):
            port = f"site{i}"
            _ip(
                "-n",
                ns,
                "link",
                "add",
                WAN,
                "type",
                "veth",
                "peer",
                "name",
                port,
                "netns",
                self.hub,
            )
            _ip("-n", ns, "link", "set", WAN, "gso_max_size", str(GSO_MAX_BYTES))
            _ip("-n", self.hub, "link", "set", port, "gso_max_size", str(GSO_MAX_BYTES))
            _ip("-n", ns, "addr", "add", f"{self.addrs[i]}/24", "dev", WAN)
            _ip("-n", ns, "link", "set", WAN, "up")
            _ip("-n", self.hub, "link", "set", port, "master", "br0")
            _ip("-n", self.hub, "link", "set", port, "up")
            self.set_rate(self.rates[i], site=i, verb="add")

    def set_rate(self, rate_mbit: float, site: int | None = None, verb: str = "change") -> None:
        """Shape site `site`'s link (every site's when None) to rate_mbit in both directions."""
        if rate_mbit <= 0:
            raise ValueError(f"a link rate must be > 0 Mbit/s, got {rate_mbit}")
        for i in range(self.num_sites) if site is None else [site]:
            tbf = ["root", "tbf", "rate", f"{rate_mbit}mbit", "burst", str(_burst_bytes(rate_mbit))]
            tbf += ["latency", "100ms"]
            for ns, dev in ((self.sites[i], WAN), (self.hub, f"site{i}")):
                subprocess.run(
                    ["ip", "netns", "exec", ns, "tc", "qdisc", verb, "dev", dev, *tbf],
                    check=True,
                    capture_output=True,
                )
            self.rates[i] = float(rate_mbit)

    def argv(self, site: int, argv: list[str]) -> list[str]:
        """The command line that runs argv inside site `site`."""
        return ["ip", "netns", "exec", self.sites[site], *argv]

    def torchrun_argv(self, site: int, script: list[str], port: int = RDZV_PORT) -> list[str]:
        """torchrun for one worker in site `site`, rendezvous hosted in site 0."""
        rdzv = [
            "--nnodes", str(self.num_sites), "--nproc-per-node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{self.addrs[0]}:{port}",
            "--rdzv-id", f"slowlink-{self.tag}", "--rdzv-conf", f"is_host={int(site == 0)}",
            "--local-addr", self.addrs[site], "--max-restarts", "0",
        ]  # fmt: skip
        return self.argv(site, [sys.executable, "-m", "torch.distributed.run", *rdzv, *script])

    def close(self) -> None:
        """Delete every namespace made (their veths go with them); safe to call twice."""
        while self._made:
            ns = self._made.pop()
            _kill_inside(ns)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _kill_inside(ns: str) -> None:
    """SIGKILL what still runs in a namespace the bed made (torchrun's workers are in their
    own process group, so killing the agent alone can leave them behind)."""
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
    for pid in out.split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


def sweep_stale() -> list[str]:
    """Delete namespaces left by a bed that was SIGKILLed (only those with the bed's prefix)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    stale = [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]
    for ns in stale:
        _kill_inside(ns)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    return stale


def run_allreduce_probe(
    bed: SlowLinkBed, rates_mbit: list[float], size_mb: float, iters: int, timeout_s: float = 120
) -> list[dict]:
    """All-reduce throughput at each rate, in ONE torchrun job (see `run_phased`)."""
    script = [str(PROBE), "--size-mb", str(size_mb), "--iters", str(iters)]
    return run_phased(bed, script, rates_mbit, timeout_s)


def run_controller_probe(
    bed: SlowLinkBed, rates_mbit: list[float], steps: int, compute_s: float, timeout_s: float = 300
) -> list[dict]:
    """The bandwidth controller on real shaped links: per-step keep ratio and exchange time."""
    script = [str(CONTROLLER_PROBE), "--steps", str(steps), "--compute-s", str(compute_s)]
    return run_phased(bed, script, rates_mbit, timeout_s)


def run_phased(
    bed: SlowLinkBed, script: list[str], rates_mbit: list[float], timeout_s: float
) -> list[dict]:
    """Run `script` under torchrun in every site, one phase per rate: the rate is changed
    between phases while the workers wait on a file handshake (namespaces share the disk)."""
    sync = pathlib.Path(f"/tmp/{PREFIX}{bed.tag}")
    sync.mkdir()
    src = str(HERE.parents[1] / "src")
    env = {**os.environ, "GLOO_SOCKET_IFNAME": WAN, "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    script = [*script, "--phases", str(len(rates_mbit)), "--sync-dir", str(sync)]
    procs = []
    try:
        bed.set_rate(rates_mbit[0])
        for site in range(bed.num_sites):
            # A log file, not a pipe: nobody reads while the job runs, and a full pipe blocks.
            with open(sync / f"site{site}.log", "w") as log:
                argv = bed.torchrun_argv(site, script)
                procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT))
        results = _drive_phases(bed, rates_mbit, sync, procs, time.monotonic() + timeout_s)
        for proc in procs:
            proc.wait(timeout=max(1.0, timeout_s))
        return results
    finally:
        for proc in procs:  # what is left inside the sites dies with the bed (`close`)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(sync, ignore_errors=True)


def _drive_phases(bed, rates_mbit, sync, procs, deadline) -> list[dict]:
    results = []
    for phase, rate in enumerate(rates_mbit):
        if phase:
            bed.set_rate(rate)
            (sync / f"go{phase}").touch()
        done = sync / f"phase{phase}.json"
        while not done.exists():
            failed = [p for p in procs if p.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                logs = "".join(f.read_text() for f in sorted(sync.glob("site*.log")))[-3000:]
                raise RuntimeError(f"all-reduce probe failed in phase {phase}: {logs}")
            time.sleep(0.05)
        row = json.loads(done.read_text())
        results.append({"rate_mbit": rate, **row})
    return results


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # bench/, run directly
    import _args

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--probe", choices=["allreduce", "controller"], default="allreduce", help="what to run"
    )
    parser.add_argument("--sites", type=int, default=2, help="network namespaces, a worker each")
    parser.add_argument(
        "--rates", type=_args.rates, default="100,500,1000", help="Mbit/s, one phase each"
    )
    parser.add_argument("--size-mb", type=float, default=8.0, help="allreduce: tensor size")
    parser.add_argument("--iters", type=int, default=5, help="allreduce: calls per phase")
    parser.add_argument("--steps", type=int, default=10, help="controller: steps per phase")
    parser.add_argument(
        "--compute-s", type=float, default=0.1, help="controller: emulated compute s per step"
    )
    parser.add_argument("--sweep", action="store_true", help="only delete stale namespaces")
    args = parser.parse_args(argv)
    for flag, value, low in (
        ("--sites", args.sites, 2),
        ("--iters", args.iters, 1),
        ("--steps", args.steps, 1),
    ):
        if value < low:
            parser.error(f"{flag} must be at least {low}, not {value}")
    if not 0 < args.size_mb < math.inf:
        parser.error(f"--size-mb must be a size above 0, not {args.size_mb}")
    if not 0 <= args.compute_s < math.inf:
        parser.error(f"--compute-s must be a number of seconds, at least 0, not {args.compute_s}")
    reason = bed_available()
    if reason:
        print(f"slowlink: error: {reason}", file=sys.stderr)
        return 2
    if args.sweep:
        print(json.dumps({"deleted": sweep_stale()}))
        return 0
    # SIGTERM becomes an exception, so the `with` below tears the bed down as on Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rates = args.rates
    with SlowLinkBed(args.sites, rates[0]) as bed:
        if args.probe == "allreduce":
            rows = run_allreduce_probe(bed, rates, args.size_mb, args.iters)
        else:
            phases = run_controller_probe(bed, rates, args.steps, args.compute_s)
            rows = [{"rate_mbit": p["rate_mbit"], **r} for p in phases for r in p["steps"]]
        for row in rows:
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
