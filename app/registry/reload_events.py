"""The `{prefix}events` listener: a published `{"model", "version"}` triggers a reload.

Redis going away is expected: the listener reconnects with exponential backoff and keeps going
until cancelled. Announcements sent while it is disconnected are lost; the registry's
filesystem poll catches those.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from app.artifacts.manifest import NAME_PATTERN
from app.settings import Settings

log = logging.getLogger(__name__)

_NAME = re.compile(NAME_PATTERN)
CONNECT_TIMEOUT_S = 1.0
MAX_EVENT_BYTES = 4096


def parse_event(data: bytes | str) -> tuple[str, str] | None:
    """(model, version) from a JSON announcement, or None when it is not a valid one."""
    # An announcement is two short names; anyone who can publish on the channel could send
    # megabytes, or 100,000 nested brackets (RecursionError), which ended the listener.
    if len(data) > MAX_EVENT_BYTES:
        return None
    try:
        event = json.loads(data)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError included
        return None
    if not isinstance(event, dict):
        return None
    model, version = event.get("model"), event.get("version")
    if not (isinstance(model, str) and isinstance(version, str)):
        return None
    # Names become paths in the registry: nothing but the manifest's name syntax gets through.
    if not (_NAME.fullmatch(model) and _NAME.fullmatch(version)):
        return None
    return model, version


async def listen_for_reloads(
    settings: Settings,
    on_event: Callable[[str, str], Awaitable[None]],
    min_backoff: float = 0.1,
    max_backoff: float = 5.0,
) -> None:
    """Call `on_event(model, version)` for each announcement; returns only without a (valid)
    Redis URL."""
    if settings.redis_url is None:
        return
    channel = f"{settings.redis_prefix}events"
    backoff = min_backoff
    # An outage is logged when it starts and when it ends, not at every retry (every 5 s).
    down_since: float | None = None
    while True:
        try:
            client = aioredis.Redis.from_url(
                settings.redis_url,
                socket_connect_timeout=CONNECT_TIMEOUT_S,
                socket_timeout=None,  # a subscriber waits for messages as long as it takes
                retry=Retry(NoBackoff(), 0),
                driver_info=None,
            )
        except ValueError as exc:
            log.error("reload events: LTR_REDIS_URL is not a usable Redis URL (%s)", exc)
            return
        try:
            async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
                await pubsub.subscribe(channel)
                if down_since is None:
                    log.info("listening for reload announcements on %s", channel)
                else:
                    log.warning(
                        "reload events: redis answers again after %.0f s; listening on %s",
                        time.monotonic() - down_since,
                        channel,
                    )
                    down_since = None
                backoff = min_backoff
                async for message in pubsub.listen():
                    await _dispatch(message, on_event)
        except (RedisError, OSError, TimeoutError) as exc:
            if down_since is None:
                down_since = time.monotonic()
                log.warning(
                    "reload events: redis %s (%s); reconnecting every %.1f s at most, logged "
                    "again when it answers (the registry's filesystem poll reloads meanwhile)",
                    type(exc).__name__,
                    exc,
                    max_backoff,
                )
            else:
                log.debug("reload events: redis %s (%s)", type(exc).__name__, exc)
        except Exception:  # a bug must cost a reconnect, not the listener for good
            log.exception("reload events: listener failed; reconnecting in %.1f s", backoff)
        finally:
            await client.aclose()
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, max_backoff)


async def _dispatch(
    message: dict[str, object], on_event: Callable[[str, str], Awaitable[None]]
) -> None:
    if message.get("type") != "message":
        return
    data = message.get("data")
    event = parse_event(data) if isinstance(data, bytes | str) else None
    if event is None:
        log.warning("reload events: ignoring a malformed announcement: %.200r", data)
        return
    try:
        await on_event(*event)
    except Exception:  # one failed reload must not stop the listener
        log.exception("reload events: handling %s/%s failed", *event)
