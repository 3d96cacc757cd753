"""Alembic environment: the URL comes from our settings (or the caller), never from an ini."""
from alembic import context

from chalicelib.db.base import Base
from chalicelib.db import tenancy
from chalicelib.db.engine import get_engine
import chalicelib.db.models  # noqa: F401  (registers every table on Base.metadata)

config = context.config
url = config.attributes.get("database_url")
engine = get_engine(url)

with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    # Data migrations touch every tenant's rows, and FORCE ROW LEVEL SECURITY binds the
    # tables' owner too.
    tenancy.act(connection, tenancy.cross_tenant("migrations"))
    with context.begin_transaction():
        context.run_migrations()
    if connection.in_transaction():
        connection.commit()
