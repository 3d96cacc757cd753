"""GET /messages?status= takes the statuses messages of each direction really have: an
incoming message received for a route in accept mode is found with status=Accepted (the
filter used to refuse every inbound status with a 422, and to take Rejected, which no
message ever has)."""
from __future__ import annotations

from chalicelib import statuses
from tests.support.smtp import make_route, plain_client, simple_mail
from tests.support import Api

MESSAGES = "/api/v2/server/messages"


def _listed(api, tenant, **params) -> list[dict]:
    return Api.data(api.get(MESSAGES, server_key=tenant.api_key, params=params))["messages"]


def test_incoming_messages_are_found_by_the_statuses_they_have(stack, api, tenant):
    make_route(api, tenant, "*", mode="accept")
    with plain_client(stack.smtp_port) as client:
        client.sendmail("frank@sender.example", [f"hello@{tenant.domain}"],
                        simple_mail("frank@sender.example", f"hello@{tenant.domain}", "Hi"))
    [found] = _listed(api, tenant, scope="incoming", status="Accepted")
    assert found["rcpt_to"] == f"hello@{tenant.domain}" and found["status"] == "Accepted"
    assert _listed(api, tenant, scope="outgoing", status="Accepted") == []
    for status in statuses.INCOMING + statuses.OUTGOING:
        assert isinstance(_listed(api, tenant, status=status), list), status
    Api.error(api.get(MESSAGES, server_key=tenant.api_key, params={"status": "Rejected"}),
              422, "ValidationError")
