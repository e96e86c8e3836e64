"""Registers every xds-protos message type in protobuf's default pool, so
json_format can resolve any "@type" (shared by the reference scripts here)."""

import importlib
import pkgutil

PACKAGES = ("envoy", "xds", "udpa", "validate")


def import_all_protos():
    """Imports every `_pb2` module of the xds-protos packages, skipping any
    that fail to import."""
    for top in PACKAGES:
        try:
            package = importlib.import_module(top)
        except ImportError:
            continue
        for info in pkgutil.walk_packages(package.__path__, top + "."):
            if info.name.endswith("_pb2"):
                try:
                    importlib.import_module(info.name)
                except Exception:  # pylint: disable=broad-except
                    pass
