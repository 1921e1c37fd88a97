# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""App-runtime usage metering (docs/metering.md): member time and scheduler jobs recorded per project, who is
charged for what (attribution.py), the periodic pass that writes the records (service.py, loop.py) and the routes
that read them (routes.py)."""
