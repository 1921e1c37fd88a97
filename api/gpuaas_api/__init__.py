"""gpuaas.apps control service: IAM, catalog, policy, allocations and clustered app instances."""

__version__ = "0.1.0"
