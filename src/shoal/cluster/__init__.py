"""Pure cluster model: device kinds, their speeds and prices (no torch)."""

from shoal.cluster.catalog import Catalog, DeviceKind, load_catalog

__all__ = ["Catalog", "DeviceKind", "load_catalog"]
