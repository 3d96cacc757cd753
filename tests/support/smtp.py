from __future__ import annotations
from tests.support.sending import SERVER
from tests.support import Api, all_tenants


def inbound(api, tenant, **params) -> list[dict]:
    return Api.data(api.get(f"{SERVER}/inbound", server_key=tenant.api_key,
                            params=params))["messages"]


def stored_raw(message_id: int) -> bytes:
    from chalicelib.db.models import Message
    from chalicelib.services import content

    with all_tenants() as db:
        message = db.get(Message, message_id)
        return content.source_bytes(db, message.submission_id)
