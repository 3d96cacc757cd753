"""Records of management resources in answers (the spec leaves them open; we follow what
Postal's and Postmark's users know): organizations, servers, domains, credentials, IP pools,
admin keys, suppressions, webhooks and their requests, routes. Shapes in
chalicelib/response_shapes/management.py."""
from __future__ import annotations

import json

from sqlalchemy.orm import Session, object_session

from chalicelib.db.models import (AdminApiKey, Credential, Domain, InfrastructureSignal,
                                  IPAddress, IPPool, Organization, Route, Server, Suppression,
                                  Webhook, WebhookRequest, WebhookRequestLog)
from chalicelib.services.inbound import routes
from chalicelib.services.webhooks import hooks
from chalicelib.services.dkim import keys as dkim_keys
from chalicelib.services.domains import names as domain_names, records as domain_records
from chalicelib.services.reputation import guard, signals
from chalicelib import response_shapes
from chalicelib.response_shapes import builds
from chalicelib.response_shapes import management as shape, reputation as reputation_shape


@builds(shape.Organization)
def organization(org: Organization) -> dict:
    return {"id": org.id, "uuid": org.uuid, "name": org.name, "permalink": org.permalink,
            "time_zone": org.time_zone, "created_at": org.created_at,
            "updated_at": org.updated_at}


@builds(shape.Server)
def server(srv: Server) -> dict:
    return {"id": srv.id, "uuid": srv.uuid, "name": srv.name, "permalink": srv.permalink,
            "organization": srv.organization.permalink if srv.organization else None,
            "mode": srv.mode, "suspended": srv.suspended, "suspended_at": srv.suspended_at,
            "suspension_reason": srv.suspension_reason, "ip_pool_id": srv.ip_pool_id,
            "track_opens": srv.track_opens, "track_clicks": srv.track_clicks,
            "message_retention_days": srv.message_retention_days,
            "content_retention_days": srv.content_retention_days,
            "send_limit_per_hour": srv.send_limit_per_hour,
            "send_limit_per_day": srv.send_limit_per_day,
            "send_limit_action": srv.send_limit_action, "send_limits": send_limits_usage(srv),
            "reputation": guard.brief(object_session(srv), srv),
            "created_at": srv.created_at, "updated_at": srv.updated_at}


def send_limits_usage(srv: Server) -> dict:
    """The limits with this hour's and day's use (counted in the database)."""
    from sqlalchemy.orm import object_session

    from chalicelib.services.sending import limits as send_limits

    # Counted only while a limit is set: without one there is nothing to read.
    return send_limits.usage(object_session(srv) if send_limits.limits(srv) else None, srv)


@builds(shape.Domain)
def domain(dom: Domain) -> dict:
    return {"id": dom.id, "uuid": dom.uuid, "name": dom.name, "verified": dom.verified,
            "verified_at": dom.verified_at, "dkim_selector": dom.dkim_selector,
            "track_opens": dom.track_opens, "track_clicks": dom.track_clicks,
            "return_path": {"host": dom.return_path_host,
                            "name": domain_names.return_path_name(dom),
                            "verified": dom.return_path_verified_at is not None,
                            "verified_at": dom.return_path_verified_at},
            "tracking": None if not dom.tracking_host else {
                "host": dom.tracking_host, "name": domain_names.tracking_name(dom),
                "verified": dom.tracking_verified_at is not None,
                "verified_at": dom.tracking_verified_at},
            "dkim_keys": dkim_keys.listing(dom),
            "dns_records": response_shapes.check(shape.DnsRecords, domain_records.dns_records(dom)),
            # The last DNS check as GET .../check answered it (kept, not looked up again).
            "dns_check": dns_check(dom.dns_check, dom.checked_at),
            "signals": signal_health(object_session(dom), signals.for_domain(dom.id)),
            "created_at": dom.created_at}


def dns_check(kept: dict | None, checked_at) -> dict | None:
    """The last DNS check kept on a domain or a sending address, as its record shows it."""
    if checked_at is None:
        return None
    records = (kept or {}).get("records") or []
    return {"checked_at": checked_at, "problems": sum(r["status"] != "ok" for r in records),
            "records": records}


@builds(shape.Credential)
def credential(cred: Credential, key: str | None = None) -> dict:
    record = {"id": cred.id, "uuid": cred.uuid, "type": cred.type, "name": cred.name,
              "hold": cred.hold, "key_hint": cred.key_hint, "ip_range": cred.ip_range,
              "last_used_at": cred.last_used_at, "created_at": cred.created_at,
              "updated_at": cred.updated_at}
    if key is not None:
        record["key"] = key  # only in the creation answer
    return record


@builds(shape.IPAddress)
def ip_address(addr: IPAddress) -> dict:
    return {"id": addr.id, "ip_pool_id": addr.ip_pool_id, "ipv4": addr.ipv4, "ipv6": addr.ipv6,
            "hostname": addr.hostname, "priority": addr.priority,
            "dns_check": dns_check(addr.dns_check, addr.checked_at),
            "signals": signal_health(object_session(addr),
                                     signals.for_address(addr.ipv4, addr.ipv6)),
            "created_at": addr.created_at}


@builds(shape.IPPool)
def ip_pool(pool: IPPool, with_addresses: bool = False) -> dict:
    record = {"id": pool.id, "uuid": pool.uuid, "name": pool.name, "default": pool.is_default,
              "relay_host": pool.relay_host, "created_at": pool.created_at}
    if with_addresses:
        record["ip_addresses"] = [ip_address(a) for a in pool.ip_addresses]
        record["signals"] = signal_health(object_session(pool), signals.for_pool(pool.id))
    return record


@builds(reputation_shape.InfrastructureSignal)
def infrastructure_signal(row: InfrastructureSignal) -> dict:
    return {"id": row.id, "created_at": row.created_at, "blames": row.blames,
            "reason": row.reason, "origin": row.origin, "source_address": row.source_address,
            "ip_pool_id": row.ip_pool_id, "domain": row.domain, "server_id": row.server_id,
            "message_id": row.message_id, "receiver": row.receiver, "code": row.code,
            "status": row.status, "text": row.text}


@builds(reputation_shape.SignalHealth)
def signal_health(db: Session, condition) -> dict:
    """The signals of an address, a pool or a domain (``signals.for_*``) in the window."""
    health = signals.summary(db, condition)
    return {**health, "receivers": [
        {"receiver": r["receiver"], "count": r["count"], "last_at": r["last_at"],
         "latest": infrastructure_signal(r["latest"])} for r in health["receivers"]]}


@builds(reputation_shape.Reputation)
def reputation(db: Session, srv: Server) -> dict:
    return guard.status(db, srv)


@builds(shape.AdminApiKey)
def admin_api_key(key: AdminApiKey, secret: str | None = None) -> dict:
    record = {"id": key.id, "uuid": key.uuid, "name": key.name, "key_hint": key.key_hint,
              "seeded": key.seeded, "last_used_at": key.last_used_at,
              "revoked_at": key.revoked_at, "created_at": key.created_at}
    if secret is not None:
        record["key"] = secret  # only in the creation answer
    return record


@builds(shape.Suppression)
def suppression(s: Suppression) -> dict:
    # ``source`` repeats ``origin`` for clients written before origins had that name.
    return {"id": s.id, "address": s.address, "reason": s.reason, "details": s.details,
            "stream": s.stream.permalink if s.stream_id and s.stream else None,
            "origin": s.origin, "source": s.origin, "bounce_reason": s.bounce_reason,
            "message_id": s.message_id, "created_at": s.created_at, "expires_at": s.expires_at}


@builds(shape.Webhook)
def webhook(webhook: Webhook) -> dict:
    return {"id": webhook.id, "uuid": webhook.uuid, "name": webhook.name, "url": webhook.url,
            "events": list(webhook.events or []), "sign": webhook.sign,
            "enabled": webhook.enabled, "headers": hooks.masked_headers(webhook),
            "last_used_at": webhook.last_used_at, "created_at": webhook.created_at,
            "updated_at": webhook.updated_at}


@builds(shape.WebhookRequest)
def webhook_request(row: WebhookRequest) -> dict:
    return {"id": row.id, "event": row.event, "uuid": row.uuid, "message_id": row.message_id,
            "attempts": row.attempts, "next_attempt_at": row.next_attempt_at,
            "in_progress": row.locked_by is not None, "created_at": row.created_at,
            "payload": json.loads(row.body)}


@builds(shape.WebhookLog)
def webhook_log(entry: WebhookRequestLog) -> dict:
    return {"id": entry.id, "event": entry.event, "uuid": entry.uuid, "url": entry.url,
            "attempt": entry.attempt, "status_code": entry.status_code,
            "success": entry.success, "response_body": entry.response_body,
            "error": entry.error, "duration_ms": entry.duration_ms,
            "will_retry": entry.will_retry, "next_attempt_at": entry.next_attempt_at,
            "created_at": entry.created_at}


@builds(shape.Route)
def route(db: Session, route: Route) -> dict:
    domain = routes.domain_name(db, route)
    return {"id": route.id, "uuid": route.uuid, "name": route.name, "domain": domain,
            "address": f"{route.name}@{domain}", "mode": route.mode, "endpoint": route.endpoint,
            "created_at": route.created_at, "updated_at": route.updated_at}


