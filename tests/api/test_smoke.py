def test_world_builds(world):
    r = world.call("project_admin", "GET", f"/v1/instances/{world.ids['instance_a1']}", 200)
    body = r.json()
    assert body["status"] == "created"
    assert {x["name"]: x["member_count"] for x in body["topology"]["roles"]} == {"controller": 1, "worker": 2}
