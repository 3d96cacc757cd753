"""Management: instance-wide resources (IP pools and addresses, admin API keys)."""
from __future__ import annotations

from chalice import Blueprint
from sqlalchemy import select

from chalicelib import response_shapes
from chalicelib.api.response_builders import management
from chalicelib.api import query as q
from chalicelib.api.framework import ADMIN, Call, endpoint, paginate
from chalicelib.api.request_bodies.admin import AdminKeyIn, IPAddressIn, IPPoolIn, IPPoolUpdate
from chalicelib.db.models import IPAddress, IPPool
from chalicelib.services.accounts import admin_keys, audit
from chalicelib.services.delivery import ip_pools
from chalicelib.services.accounts.permissions import authorize
from chalicelib.response_shapes import management as shape

bp = Blueprint(__name__)


@endpoint(bp, "/ip_pools", "GET", auth=ADMIN, query=q.PAGINATION,
          response=response_shapes.page("ip_pools", shape.IPPool))
def list_ip_pools(call: Call):
    authorize(call.principal, "ip_pools.read")
    rows, pagination = paginate(call.db, select(IPPool).order_by(IPPool.id), *call.page_args())
    return {"ip_pools": [management.ip_pool(p) for p in rows], "pagination": pagination}


@endpoint(bp, "/ip_pools", "POST", auth=ADMIN, body=IPPoolIn, status=201,
          response=response_shapes.one("ip_pool", shape.IPPool))
def create_ip_pool(call: Call):
    authorize(call.principal, "ip_pools.manage")
    return {"ip_pool": management.ip_pool(ip_pools.create_pool(
        call.db, call.body.name, call.body.default, call.body.relay_host), True)}


@endpoint(bp, "/ip_pools/{id}", "GET", auth=ADMIN,
          response=response_shapes.one("ip_pool", shape.IPPool))
def show_ip_pool(call: Call, id: int):
    authorize(call.principal, "ip_pools.read")
    return {"ip_pool": management.ip_pool(ip_pools.find_pool(call.db, id), True)}


@endpoint(bp, "/ip_pools/{id}", "PATCH", auth=ADMIN, body=IPPoolUpdate,
          response=response_shapes.one("ip_pool", shape.IPPool))
def update_ip_pool(call: Call, id: int):
    authorize(call.principal, "ip_pools.manage")
    pool = ip_pools.update_pool(call.db, ip_pools.find_pool(call.db, id),
                                call.body.model_dump(exclude_unset=True))
    return {"ip_pool": management.ip_pool(pool, True)}


@endpoint(bp, "/ip_pools/{id}", "DELETE", auth=ADMIN,
          response=response_shapes.deleted("ip_pool", shape.IPPool))
def delete_ip_pool(call: Call, id: int):
    authorize(call.principal, "ip_pools.manage")
    pool = ip_pools.find_pool(call.db, id)
    record = management.ip_pool(pool)
    call.db.delete(pool)
    return {"ip_pool": record, "deleted": True}


@endpoint(bp, "/ip_pools/{pool_id}/ip_addresses", "GET", auth=ADMIN, query=q.PAGINATION,
          response=response_shapes.page("ip_addresses", shape.IPAddress))
def list_ip_addresses(call: Call, pool_id: int):
    authorize(call.principal, "ip_pools.read")
    pool = ip_pools.find_pool(call.db, pool_id)
    stmt = select(IPAddress).where(IPAddress.ip_pool_id == pool.id).order_by(IPAddress.id)
    rows, pagination = paginate(call.db, stmt, *call.page_args())
    return {"ip_addresses": [management.ip_address(a) for a in rows], "pagination": pagination}


@endpoint(bp, "/ip_pools/{pool_id}/ip_addresses", "POST", auth=ADMIN, body=IPAddressIn, status=201,
          response=response_shapes.one("ip_address", shape.IPAddress))
def add_ip_address(call: Call, pool_id: int):
    authorize(call.principal, "ip_pools.manage")
    pool = ip_pools.find_pool(call.db, pool_id)
    address = ip_pools.add_address(call.db, pool, ipv4=call.body.ipv4, ipv6=call.body.ipv6,
                                   hostname=call.body.hostname, priority=call.body.priority)
    return {"ip_address": management.ip_address(address)}


@endpoint(bp, "/ip_pools/{pool_id}/ip_addresses/{id}", "GET", auth=ADMIN,
          response=response_shapes.one("ip_address", shape.IPAddress))
def show_ip_address(call: Call, pool_id: int, id: int):
    authorize(call.principal, "ip_pools.read")
    pool = ip_pools.find_pool(call.db, pool_id)
    return {"ip_address": management.ip_address(ip_pools.find_address(call.db, pool, id))}


@endpoint(bp, "/ip_pools/{pool_id}/ip_addresses/{id}/check", "GET", auth=ADMIN,
          response=response_shapes.one("ip_address", shape.IPAddress))
def check_ip_address(call: Call, pool_id: int, id: int):
    """Look the address's reverse DNS up now (PTR, forward confirmation, HELO match) and keep
    the result, as GET .../domains/{name}/check does for a domain."""
    from chalicelib.services.delivery import address_health  # dnspython: not at cold start

    authorize(call.principal, "ip_pools.read")
    address = ip_pools.find_address(call.db, ip_pools.find_pool(call.db, pool_id), id)
    return {"ip_address": management.ip_address(address_health.check_address(address))}


@endpoint(bp, "/ip_pools/{pool_id}/ip_addresses/{id}", "DELETE", auth=ADMIN,
          response=response_shapes.deleted("ip_address", shape.IPAddress))
def delete_ip_address(call: Call, pool_id: int, id: int):
    authorize(call.principal, "ip_pools.manage")
    address = ip_pools.find_address(call.db, ip_pools.find_pool(call.db, pool_id), id)
    record = management.ip_address(address)
    call.db.delete(address)
    return {"ip_address": record, "deleted": True}


@endpoint(bp, "/admin_api_keys", "GET", auth=ADMIN, query=q.PAGINATION,
          response=response_shapes.page("admin_api_keys", shape.AdminApiKey))
def list_admin_keys(call: Call):
    authorize(call.principal, "admin_keys.manage")
    rows, pagination = paginate(call.db, admin_keys.active_keys_query(), *call.page_args())
    return {"admin_api_keys": [management.admin_api_key(k) for k in rows], "pagination": pagination}


@endpoint(bp, "/admin_api_keys", "POST", auth=ADMIN, body=AdminKeyIn, status=201,
          response=response_shapes.one("admin_api_key", shape.AdminApiKey))
def create_admin_key(call: Call):
    authorize(call.principal, "admin_keys.manage")
    user_id = call.principal.user.id if call.principal.user else None
    key, secret = admin_keys.create_key(call.db, call.body.name, user_id)
    _audit_key(call, "admin_api_key_created", key)
    return {"admin_api_key": management.admin_api_key(key, secret)}


@endpoint(bp, "/admin_api_keys/{id}", "DELETE", auth=ADMIN,
          response=response_shapes.one("admin_api_key", shape.AdminApiKey))
def revoke_admin_key(call: Call, id: int):
    authorize(call.principal, "admin_keys.manage")
    key = admin_keys.revoke(call.db, id)
    _audit_key(call, "admin_api_key_revoked", key)
    return {"admin_api_key": management.admin_api_key(key)}


def _audit_key(call: Call, event: str, key) -> None:
    by = (f"admin API key {call.principal.admin_key.id}" if call.principal.is_admin_key
          else f"user {call.principal.user.id}")
    audit.record(call.db, event, audit.Client(call.ip_address, call.user_agent),
                 user=call.principal.user, details=f"key {key.id} ({key.name}) by {by}")
