"""Issue 22, finding 2: "one host, one tenant" compared address strings. A host that one tenant held
as `127.0.0.1` was registered for another as `127.000.000.001`, `localhost`, `127.1` and `0x7f000001`
(201 each). Hosts are now compared by the addresses they reach: a name is resolved at registration
(an unresolvable one is a 422), IPv6 is compared compressed and IPv4-mapped IPv6 as its IPv4 address,
and IPv4 spellings other than dotted decimal are refused (422). Allocations stored before the change
are compared the same way, and so are the hosts that instances bind (finding 4's one-instance rule).
Only loopback names and literals are resolved here; the one unresolvable name is a test double."""

from __future__ import annotations

import socket

import pytest
from psycopg.types.json import Jsonb

from security.test_f4_hosts_apart import PA, allocation, create

# Another tenant's spellings of a host held as 127.0.0.1, and how each is refused: 409 for the same
# host, 422 for an IPv4 spelling that is not dotted decimal.
SPELLINGS_OF_127_0_0_1 = {"127.0.0.1": 409, "127.000.000.001": 422, "localhost": 409, "LocalHost": 409,
                          "127.1": 422, "0x7f000001": 422, "0177.0.0.1": 422, "::ffff:127.0.0.1": 409,
                          "0:0::ffff:7f00:1": 409}
SPELLINGS_OF_IPV6_LOOPBACK = ["::1", "0:0::1", "0000:0000:0000:0000:0000:0000:0000:0001", "::0:1"]


def register(ops, project: str, name: str, address: str, port: int = 22):
    return ops.w.client.post("/v1/allocations", headers=ops.w.headers(PA), json={
        "project_id": ops.ids[project], "name": name, "capacity_shape": "baremetal", "gpu_count": 8,
        "region": "eu-west-1", "hosts": [{"name": "h", "address": address, "ssh_port": port}]})


def refused(response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == {409: "host_registered_elsewhere", 422: "validation_error"}[status]
    return error


@pytest.mark.parametrize("spelling", SPELLINGS_OF_127_0_0_1)
def test_a_held_host_is_refused_to_another_tenant_under_any_spelling(ops, spelling):
    allocation(ops, "project_a1", "mine", [("n1", "127.0.0.1", 22)])
    error = refused(register(ops, "project_b1", "theirs", spelling), SPELLINGS_OF_127_0_0_1[spelling])
    if error["code"] == "host_registered_elsewhere":
        assert "127.0.0.1" in error["message"]
    else:
        assert "dotted decimal" in error["message"] + str(error["details"])
    # the holder's own tenant may still register it again, in any accepted spelling
    if SPELLINGS_OF_127_0_0_1[spelling] == 409:
        allocation(ops, "project_a2", "sibling", [("n1", spelling, 22)])


@pytest.mark.parametrize("held", ["localhost", "::ffff:127.0.0.1"])
def test_a_host_held_under_another_spelling_is_refused_as_its_address(ops, held):
    allocation(ops, "project_a1", "mine", [("n1", held, 22)])
    refused(register(ops, "project_b1", "theirs", "127.0.0.1"), 409)
    allocation(ops, "project_b1", "theirs", [("n1", "127.0.0.1", 2222)])  # another port is another host


@pytest.mark.parametrize("spelling", SPELLINGS_OF_IPV6_LOOPBACK)
def test_ipv6_is_compared_compressed(ops, spelling):
    allocation(ops, "project_a1", "mine", [("n1", "0:0:0::1", 22)])
    error = refused(register(ops, "project_b1", "theirs", spelling.upper()), 409)
    assert "::1" in error["message"]


@pytest.mark.parametrize("stored", ["127.1", "LOCALHOST", "127.000.000.001", "0:0::ffff:7f00:1"])
def test_allocations_stored_before_the_change_are_compared_too(ops, stored):
    """A row written by the code before this change (its spellings passed the old validation)."""
    ops.sql("""INSERT INTO allocations (tenant_id, project_id, name, capacity_shape, gpu_count, region, exclusive,
                   hosts) VALUES (%s, %s, 'before', 'baremetal', 8, 'eu-west-1', true, %s) RETURNING id""",
            (ops.ids["tenant_a"], ops.ids["project_a1"], Jsonb([{"name": "old", "address": stored,
                                                                 "ssh_user": "root", "ssh_port": 22}])))
    refused(register(ops, "project_b1", "theirs", "127.0.0.1"), 409)
    refused(register(ops, "project_b1", "theirs", "localhost"), 409)


def test_one_allocation_may_not_name_a_host_twice(ops):
    for first, second in [("127.0.0.1", "localhost"), ("::1", "0:0::1"), ("127.0.0.1", "::ffff:127.0.0.1")]:
        r = ops.w.call(PA, "POST", "/v1/allocations", 422, json={
            "project_id": ops.ids["project_a1"], "name": "twice", "capacity_shape": "baremetal", "gpu_count": 8,
            "region": "eu-west-1", "hosts": [{"name": "a", "address": first}, {"name": "b", "address": second}]})
        assert r.json()["error"]["code"] == "validation_error", r.text
    allocation(ops, "project_a1", "ports", [("a", "127.0.0.1", 22), ("b", "localhost", 2222)])


def test_a_name_that_does_not_resolve_is_a_422(ops, monkeypatch):
    real = socket.getaddrinfo

    def getaddrinfo_double(host, *args, **kwargs):
        """Test double for DNS (no traffic leaves loopback here): one name answers NXDOMAIN."""
        if host == "gone.example.test":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo_double)
    error = refused(register(ops, "project_a1", "gone", "gone.example.test"), 422)
    assert "gone.example.test" in error["message"]
    assert [e["loc"] for e in error["details"]["errors"]] == [["body", "hosts", "0", "address"]]
    assert ops.sql("SELECT 1 FROM allocations WHERE name = 'gone'") == []


def test_an_instance_host_is_bound_under_every_spelling(ops):
    """Finding 4's one-instance rule: one tenant's two allocations naming one machine differently."""
    x = allocation(ops, "project_a1", "as-ip", [("x", "127.0.0.1", 22)])
    y = allocation(ops, "project_a1", "as-name", [("y", "localhost", 22)])
    one = [{"role": "controller", "count": 1, "placement": [{"allocation_id": x["id"], "host_name": "x"}]},
           {"role": "worker", "count": 1, "placement": [{"allocation_id": x["id"], "host_name": "x"}]}]
    create(ops, "one", 201, [x["id"]], one)
    two = [{"role": "controller", "count": 1, "placement": [{"allocation_id": y["id"], "host_name": "y"}]},
           {"role": "worker", "count": 1, "placement": [{"allocation_id": y["id"], "host_name": "y"}]}]
    r = create(ops, "two", 409, [y["id"]], two)
    assert r["error"]["code"] == "host_in_use"
