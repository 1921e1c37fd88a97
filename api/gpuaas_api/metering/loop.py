# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The worker's metering thread: a pass (service.run_pass) every metering_interval_seconds, apart from the
operation slots and the health checks. Every worker runs one; the cursors' row locks keep their passes apart."""

from __future__ import annotations

import logging
import threading
import time

import psycopg

from ..config import OperationSettings
from ..db import Database
from . import service

log = logging.getLogger(__name__)


class Metering:
    def __init__(self, database: Database, settings: OperationSettings, stop: threading.Event):
        self.db, self.settings, self.stop = database, settings, stop

    def start(self) -> list[threading.Thread]:
        if self.settings.metering_interval_seconds <= 0:
            return []
        thread = threading.Thread(target=self._loop, name="metering", daemon=True)
        thread.start()
        return [thread]

    def _loop(self) -> None:
        # The first pass one interval after the start: a worker that restarts does not meter on every start.
        while not self.stop.wait(self.settings.metering_interval_seconds):
            started = time.monotonic()
            try:
                result = service.run_pass(self.db, self.settings, stop=self.stop)
            except psycopg.OperationalError as exc:
                log.warning("metering: database unavailable (%s); next pass in %.0f s", type(exc).__name__,
                            self.settings.metering_interval_seconds)
                continue
            except Exception:  # noqa: BLE001 - the next pass tries again
                log.exception("metering pass failed; next pass in %.0f s", self.settings.metering_interval_seconds)
                continue
            log.info("metering: pass in %.1f s: %d cursor(s) moved, %d record(s) written, %d instance(s) not read",
                     time.monotonic() - started, result.metered, result.records, len(result.failed))
