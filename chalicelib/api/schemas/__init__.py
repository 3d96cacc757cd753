"""Request body models of the HTTP surfaces (the OpenAPI document is generated from them)."""
from pydantic import BaseModel, ConfigDict


class Schema(BaseModel):
    """Base of every request body model. defer_build: a model's validator is built the first
    time it validates (or the OpenAPI generator reads it), not at import (cold start)."""

    model_config = ConfigDict(defer_build=True)
