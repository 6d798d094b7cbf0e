"""numba's on-disk cache of the service's kernels, seeded from a copy baked into the image.

A fresh container starts with numba's cache empty, so every pod that starts (a rollout, the
autoscaler adding replicas under load) compiled the body scan, the shed path's ids and the item
lookup before /readyz answered 200 (and the body scan's word form after it): 45 s of CPU for
the body scan alone on a 2-vCPU VM, spent when the pod is wanted most. The serve image compiles
them once when it is built (`python -m app.kernel_warmup` with NUMBA_CACHE_DIR pointing into
the image) and names that directory in LTR_NUMBA_CACHE_SEED; `ltr serve` copies what the
process's own cache directory lacks before any worker starts. numba does not use a read-only
cache directory, and Kubernetes mounts a fresh writable `/tmp` (where NUMBA_CACHE_DIR points)
over the image's, hence a copy.

numba keys each cached kernel by its source file's path, size and modification time, and by
the CPU it was compiled for (its name and features): the image's files are the ones it was
built from, and on a machine whose CPU differs from the build machine's, numba finds no entry
for its own CPU, compiles as it would have anyway and adds its entry beside the baked one.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger(__name__)


def seed(baked: Path, cache: Path) -> int:
    """Copies the files under `baked` that `cache` lacks into it (its layout kept; a file
    already there is left as it is: it may be newer); the number copied."""
    copied = 0
    for source in baked.rglob("*"):
        if not source.is_file():
            continue
        target = cache / source.relative_to(baked)
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        # Whole or not at all: another server starting on the same host may be reading it.
        partial = target.with_name(f".{target.name}.{os.getpid()}.part")
        shutil.copyfile(source, partial)
        os.replace(partial, target)
        copied += 1
    return copied


def seed_numba_cache(baked: Path | None) -> int:
    """seed() into NUMBA_CACHE_DIR when both are set and `baked` exists; a problem is logged,
    never raised (without the seed, the kernels compile as before)."""
    cache = os.environ.get("NUMBA_CACHE_DIR")
    if baked is None or not cache:
        return 0
    if not baked.is_dir():
        log.warning("LTR_NUMBA_CACHE_SEED %s is not a directory: kernels compile at start", baked)
        return 0
    try:
        copied = seed(baked, Path(cache))
    except OSError as exc:
        log.warning("numba cache not seeded from %s: %s", baked, exc)
        return 0
    log.info("numba cache %s: %d kernel files seeded from %s", cache, copied, baked)
    return copied
