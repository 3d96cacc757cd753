"""Inputs schemathesis found that reached the database driver: NUL characters (PostgreSQL text
cannot hold them) and ids beyond BIGINT. They answer the envelope, never a 500."""
from __future__ import annotations

from tests.support import Api


def test_nul_in_body_names_the_field(api, tenant):
    resp = api.post("/api/v2/server/streams", {"name": "a\x00b"}, server_key=tenant.api_key)
    assert Api.error(resp, 422, "ValidationError")["field"] == "name"
    resp = api.post("/api/v2/server/messages", {
        "from": f"a@{tenant.domain}", "to": ["b@example.net"], "metadata": {"k": ["x", "\x00"]}},
        server_key=tenant.api_key)
    assert Api.error(resp, 422, "ValidationError")["field"] == "metadata.k[1]"


def test_nul_in_query_and_path(api, tenant):
    resp = api.get("/api/v2/server/messages?tag=a%00b", server_key=tenant.api_key)
    assert Api.error(resp, 422, "ValidationError")["field"] == "tag"
    resp = api.get("/api/v2/server/streams/a%00b", server_key=tenant.api_key)
    Api.error(resp, 404, "NotFound")


def test_ids_beyond_bigint_are_not_found(api, tenant):
    for raw in ("9447434460043472896", "543448538933336968527872", "0", "-3"):
        Api.error(api.get(f"/api/v2/server/messages/{raw}", server_key=tenant.api_key),
                  404, "NotFound")
    Api.error(api.get("/api/v2/admin/ip_pools/543448538933336968527872/ip_addresses"),
              404, "NotFound")


def test_ids_beyond_32_bits_on_32_bit_tables(api):
    # users.id is a 32-bit column on PostgreSQL: the driver refuses the value, not a lookup miss.
    Api.error(api.get("/api/v2/admin/users/9223372036854775806"), 404, "NotFound")
    Api.error(api.post("/api/v2/admin/users/9223372036854775806/password_reset"), 404, "NotFound")
