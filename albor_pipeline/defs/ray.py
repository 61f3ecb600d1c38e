"""dagster-ray's resource for `execution.backend: ray` (imported only then: `[ray]` extra)."""

from __future__ import annotations

from dagster_ray import RayResource

from albor_pipeline.runtime.executor import cpu_count
from albor_pipeline.spec import ExecutionSpec


class RayCluster(RayResource):
    """An existing cluster at `address`, or (no address) a local Ray this run starts and stops.

    dagster-ray's `LocalRay` always passes `address=None`, which joins whatever `RAY_ADDRESS`
    names; `"local"` always starts a fresh instance, so a run never lands on a stranger's.
    """

    address: str | None = None

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


def ray_resource(spec: ExecutionSpec) -> RayCluster:
    """The resource for `spec`: a local Ray gets `workers` CPUs and no dashboard."""
    if spec.address:
        return RayCluster(address=spec.address)
    options = {"num_cpus": spec.workers or cpu_count(), "include_dashboard": False}
    return RayCluster(ray_init_options=options)
