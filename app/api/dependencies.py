"""What routes get injected: the app's settings, registry, user-feature resolver, item
feature store and impression log, and the admin token check. All live on `app.state`, set
by the lifespan in `app.main`.

The providers are `async def` on purpose: FastAPI runs a plain `def` dependency in a worker
thread, a hand-off that cost ~0.5 ms per dependency per request under load (measured).
"""

from __future__ import annotations

import secrets
from typing import Annotated

import anyio
from fastapi import Depends, HTTPException, Request

from app.features.item_store import ItemFeatureStore
from app.features.user_features import UserFeatureResolver
from app.impressions import ImpressionLog
from app.registry import ModelRegistry
from app.settings import Settings


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_registry(request: Request) -> ModelRegistry:
    registry: ModelRegistry = request.app.state.registry
    return registry


async def get_resolver(request: Request) -> UserFeatureResolver:
    resolver: UserFeatureResolver = request.app.state.resolver
    return resolver


async def get_scoring_limiter(request: Request) -> anyio.CapacityLimiter:
    limiter: anyio.CapacityLimiter = request.app.state.scoring_limiter
    return limiter


async def get_item_store(request: Request) -> ItemFeatureStore:
    store: ItemFeatureStore = request.app.state.item_store
    return store


async def get_impressions(request: Request) -> ImpressionLog | None:
    """None when impression logging was never set up (an app without its lifespan)."""
    impressions: ImpressionLog | None = getattr(request.app.state, "impressions", None)
    return impressions


async def require_admin(request: Request) -> None:
    """`Authorization: Bearer <LTR_ADMIN_TOKEN>`: 401 without credentials, 403 when wrong or
    when no token is configured (the admin endpoints are then off)."""
    token = request.app.state.settings.admin_token
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if not header or scheme.lower() != "bearer" or not given.strip():
        raise HTTPException(
            401,
            "admin token required: Authorization: Bearer <token>",
            {"WWW-Authenticate": "Bearer"},
        )
    if not token:
        raise HTTPException(403, "admin endpoints are disabled (LTR_ADMIN_TOKEN is not set)")
    if not secrets.compare_digest(given.strip().encode(), token.encode()):
        raise HTTPException(403, "wrong admin token")


SettingsDep = Annotated[Settings, Depends(get_settings)]
RegistryDep = Annotated[ModelRegistry, Depends(get_registry)]
ResolverDep = Annotated[UserFeatureResolver, Depends(get_resolver)]
ScoringLimiterDep = Annotated[anyio.CapacityLimiter, Depends(get_scoring_limiter)]
ItemStoreDep = Annotated[ItemFeatureStore, Depends(get_item_store)]
ImpressionsDep = Annotated[ImpressionLog | None, Depends(get_impressions)]
AdminDep = Depends(require_admin)
