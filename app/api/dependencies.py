"""What routes get injected: the app's settings, registry and impression log, what /rerank
uses (`Services`), and the admin token check. All live on `app.state`, set
by the lifespan in `app.main`.

The providers are `async def` on purpose: FastAPI runs a plain `def` dependency in a worker
thread, a hand-off that cost ~0.5 ms per dependency per request under load (measured).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Annotated

import anyio
from fastapi import Depends, HTTPException, Request

from app.api.exploration import Exploration
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


async def get_impressions(request: Request) -> ImpressionLog | None:
    """None when impression logging was never set up (an app without its lifespan)."""
    impressions: ImpressionLog | None = getattr(request.app.state, "impressions", None)
    return impressions


@dataclass(frozen=True)
class Services:
    """What /rerank uses, injected as one dependency: FastAPI solves each of a route's
    dependencies on every request, and one instead of six took 0.05-0.15 ms off a
    100-candidate request (BENCHMARKS.md, the thirteenth session's point runs)."""

    registry: ModelRegistry
    resolver: UserFeatureResolver
    settings: Settings
    limiter: anyio.CapacityLimiter
    item_store: ItemFeatureStore
    impressions: ImpressionLog | None
    exploration: Exploration | None = None


async def get_services(request: Request) -> Services:
    state = request.app.state
    return Services(
        state.registry,
        state.resolver,
        state.settings,
        state.scoring_limiter,
        state.item_store,
        getattr(state, "impressions", None),
        getattr(state, "exploration", None),
    )


async def require_admin(request: Request) -> None:
    """`Authorization: Bearer <LTR_ADMIN_TOKEN>`: 403 when no token is configured (the admin
    endpoints are then off, whatever the request sends), 401 without credentials, 403 when
    wrong."""
    token = request.app.state.settings.admin_token
    if not token:
        raise HTTPException(403, "admin endpoints are disabled (LTR_ADMIN_TOKEN is not set)")
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if not header or scheme.lower() != "bearer" or not given.strip():
        raise HTTPException(
            401,
            "admin token required: Authorization: Bearer <token>",
            {"WWW-Authenticate": "Bearer"},
        )
    if not secrets.compare_digest(given.strip().encode(), token.encode()):
        raise HTTPException(403, "wrong admin token")


SettingsDep = Annotated[Settings, Depends(get_settings)]
RegistryDep = Annotated[ModelRegistry, Depends(get_registry)]
ImpressionsDep = Annotated[ImpressionLog | None, Depends(get_impressions)]
ServicesDep = Annotated[Services, Depends(get_services)]
AdminDep = Depends(require_admin)
