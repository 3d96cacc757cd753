from chalicelib.db.engine import after_commit, dialect_name, get_engine, session_scope

__all__ = ["after_commit", "dialect_name", "get_engine", "session_scope"]
