"""dagster-ray's resource for `execution.backend: ray` (imported only then: `[ray]` extra)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
from dagster_ray import RayResource
from pydantic import PrivateAttr

from albor_pipeline.runtime.executor import cpu_count
from albor_pipeline.runtime.watchdog import watch_processes
from albor_pipeline.spec import ExecutionSpec

LOOPBACK_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch, read once as `ray` is imported (`ray_constants.ENABLE_RAY_CLUSTER`): "0" puts
a node on 127.0.0.1, and its every server (GCS, raylet, object manager, agents, workers) then
listens on loopback only; otherwise Ray swaps 127.0.0.1 for the machine's address and listens
on all interfaces. No `ray.init` option does it: `_node_ip_address="127.0.0.1"` goes through
`services.resolve_ip_for_localhost`, which makes the same swap (Ray 2.60)."""

VITAL = {
    "raylet": "raylet",
    "gcs_server": "GCS server",
    "ray::DashboardAgent": "dashboard agent",
    "ray::RuntimeEnvAgent": "runtime env agent",
}
"""A local Ray's processes it cannot run without (an agent's death takes its raylet down, and
the raylet's the run process), by their command's first word (a path's last part)."""


class RayCluster(RayResource):
    """An existing cluster at `address`, or (no address) a local Ray this run starts and stops.

    dagster-ray's `LocalRay` always passes `address=None`, which joins whatever `RAY_ADDRESS`
    names; `"local"` always starts a fresh instance, so a run never lands on a stranger's.
    A local Ray listens on loopback only, and the run watches its vital processes: when one
    dies, Ray ends the run process (exit 1) within a second, and the log has named it first.
    """

    address: str | None = None

    _stop_watching: Callable[[], None] | None = PrivateAttr(default=None)  # set once connected

    @property
    def host(self) -> str:
        return (self.address or "127.0.0.1").removeprefix("ray://").split(":")[0]

    @property
    def name(self) -> str:
        return f"Ray at {self.address}" if self.address else "local Ray"

    @property
    def ray_address(self) -> str:
        return self.address or "local"

    @property
    def created(self) -> bool:
        return True

    @property
    def ready(self) -> bool:
        return True

    def on_connect(self, context: Any) -> None:
        """A local Ray: check it is on loopback, and watch its vital processes."""
        super().on_connect(context)
        if self.address:
            return
        import ray

        if (ip := ray.util.get_node_ip_address()) != "127.0.0.1":
            raise RuntimeError(
                f"a local Ray would listen on {ip}, not on loopback only: Ray was imported in this "
                f"process before the run set {LOOPBACK_ONLY}=0; set it in the environment, or give "
                "execution.address"
            )
        log = context.log
        self._stop_watching = watch_processes(
            ray_processes(os.getpid()),
            lambda died: log.error(f"Ray's {died} died; the local Ray is gone and the run fails"),
        )

    def cleanup(self, context: Any, exception: BaseException | None) -> None:
        if self._stop_watching is not None:  # a start-up that failed before it connected watches nothing
            self._stop_watching()  # Ray's own shutdown ends them next
        super().cleanup(context, exception)


def ray_processes(root: int) -> dict[int, str]:
    """The `VITAL` processes among `root`'s descendants (a local Ray's), pid -> what it is."""
    children: dict[int, list[int]] = {}
    commands: dict[int, str] = {}  # pid -> its executable
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            commands[int(entry.name)] = (entry / "cmdline").read_bytes().split(b"\0")[0].decode()
        except (OSError, ValueError, IndexError):
            continue  # not a process, or gone
        children.setdefault(parent, []).append(int(entry.name))
    found: dict[int, str] = {}
    todo = [root]
    while todo:
        for pid in children.get(todo.pop(), []):
            todo.append(pid)
            if (name := VITAL.get(commands[pid].rsplit("/", 1)[-1])) is not None:
                found[pid] = name
    return found


def ray_resource(spec: ExecutionSpec) -> RayCluster:
    """The resource for `spec`: a local Ray gets `workers` CPUs, no dashboard and loopback only."""
    if spec.address:
        return RayCluster(address=spec.address)
    options = {"num_cpus": spec.workers or cpu_count(), "include_dashboard": False}
    return RayCluster(ray_init_options=options)


@contextmanager
def run_ray(spec: ExecutionSpec, context: dg.InitResourceContext) -> Iterator[RayCluster]:
    """The run's Ray, connected for the block. A local one starts with LOOPBACK_ONLY=0 in the
    environment, and only while it starts: `ray` is first imported then, and the GCS server
    and raylet it starts (which start the agents and workers) inherit it."""
    with ExitStack() as stack:
        previous = os.environ.get(LOOPBACK_ONLY)
        if not spec.address:
            os.environ[LOOPBACK_ONLY] = "0"
        try:
            ray = stack.enter_context(ray_resource(spec).yield_for_execution(context))
        finally:
            if previous is None:
                os.environ.pop(LOOPBACK_ONLY, None)
            else:
                os.environ[LOOPBACK_ONLY] = previous
        yield ray
