-- Issue 22, finding 2: hosts are compared by the IP addresses they reach, not by how their address is
-- spelled. host_addresses maps each host name to its canonical addresses, resolved at registration.
-- Rows registered before this migration are filled in by the service (allocations.service.lock_hosts)
-- under the hosts lock before any decision reads them: resolving a name needs Python, not SQL.
ALTER TABLE allocations ADD COLUMN host_addresses jsonb;
CREATE INDEX allocations_host_addresses_missing ON allocations (id)
    WHERE host_addresses IS NULL AND released_at IS NULL;
