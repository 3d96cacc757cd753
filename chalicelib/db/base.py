"""Declarative base and column helpers shared by every model module."""
# No `from __future__ import annotations` here nor in the model modules: with real annotations
# SQLAlchemy reads each column's type as it is instead of evaluating ~300 annotation strings at
# import, ~15 ms of a cold start. (Forward references stay quoted: Mapped["Organization"].)

import secrets
import uuid as uuid_module
from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Integer, MetaData, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from chalicelib import clock

# Stable constraint names so migrations are identical on PostgreSQL and SQLite.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# 64-bit ids on PostgreSQL; SQLite only autoincrements a plain INTEGER primary key.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


def new_uuid() -> str:
    return str(uuid_module.uuid4())


def new_token(length: int = 16) -> str:
    """A short random public identifier (not a secret)."""
    return secrets.token_urlsafe(length)[:length]


class Timestamps:
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=clock.now, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(), default=clock.now, onupdate=clock.now, nullable=False
    )


def uuid_column() -> Mapped[str]:
    return mapped_column(String(36), default=new_uuid, unique=True, nullable=False)
