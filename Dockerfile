# Two images from one file: `serve` (the API: no compiler, no torch, no LightGBM) and `trainer`
# (the nightly job). Stages are ordered so that building `--target serve` never builds the
# trainer's wheels, with BuildKit or with the classic builder (docker-compose 1.29), which
# builds every stage before its target.
#
# Build arguments:
#   PYTHON_IMAGE     base of every stage: python:3.11-slim, or any Debian/Ubuntu image with
#                    python3 and python3-venv (deploy/docker/build-base-images.sh makes one from
#                    Debian's packages where Docker Hub is unreachable)
#   TRAINER_EXTRAS   what the trainer image installs (default: serve,train,dnn; serve,train
#                    leaves torch out: native LambdaMART and LightGBM engines only)
#   TORCH_INDEX_URL  where torch comes from (default: PyTorch's CPU-only index, a 200 MB wheel
#                    instead of PyPI's CUDA build); empty: PyPI alone
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
COPY trainer ./trainer
# The runtime stages copy this virtualenv whole (same base image, same path): no wheel files
# left in a layer. Every dependency ships manylinux wheels, so no stage has a compiler.
RUN python3 -m venv /opt/pip \
 && python3 -m venv --without-pip /opt/ltr \
 && /opt/pip/bin/pip --python /opt/ltr/bin/python install --prefer-binary ".[serve]"
# numba's cache of the service's kernels (body scan, shed ids, item lookup), compiled here once
# for this machine's CPU: `ltr serve` copies it into NUMBA_CACHE_DIR at start, so a new pod loads
# them in a second instead of compiling for a minute before /readyz (app/numba_cache_seed.py).
# On another CPU numba compiles as it would have without it.
# (From /, not /src: the installed package, whose paths numba keys the cache by.)
RUN cd / && NUMBA_CACHE_DIR=/opt/ltr/numba-seed /opt/ltr/bin/python -m app.kernel_warmup

FROM ${PYTHON_IMAGE} AS serve
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/ltr/bin:$PATH \
    LTR_REGISTRY=/registry LTR_HOST=0.0.0.0 LTR_PORT=8000 LTR_PROBE_PORT=8001 LTR_WORKERS=2 \
    LTR_COMPILED_CACHE_DIR=/tmp/ltr-compiled NUMBA_CACHE_DIR=/tmp/numba-cache \
    LTR_NUMBA_CACHE_SEED=/opt/ltr/numba-seed
RUN useradd --system --uid 10001 --user-group --home-dir /nonexistent --shell /usr/sbin/nologin ltr \
 && mkdir -p /registry && chown ltr:ltr /registry
COPY --from=build /opt/ltr /opt/ltr
USER 10001:10001
EXPOSE 8000 8001
# /livez on the probe port (a thread per worker answers it, never queued behind requests); it
# fails only on an event loop stalled for 30 s. 6 misses in a row before Docker calls it
# unhealthy.
HEALTHCHECK --interval=10s --timeout=10s --start-period=120s --retries=6 \
  CMD ["python", "-c", "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8001/livez', timeout=9).status == 200 else 1)"]
CMD ["ltr", "serve"]

FROM build AS build-trainer
ARG TRAINER_EXTRAS=serve,train,dnn
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# The torch index only when torch is installed (dnn): else pip would retry an unreachable
# index for every package. Where that index cannot be reached, pip falls back to PyPI's torch,
# a CUDA build of several GB: build with TRAINER_EXTRAS=serve,train there.
RUN case ",${TRAINER_EXTRAS}," in *,dnn,*) index="$TORCH_INDEX_URL" ;; *) index="" ;; esac \
 && /opt/pip/bin/pip --python /opt/ltr/bin/python install --prefer-binary ".[${TRAINER_EXTRAS}]" \
      ${index:+--extra-index-url "$index"}

FROM ${PYTHON_IMAGE} AS trainer
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/ltr/bin:$PATH \
    LTR_REGISTRY=/registry NUMBA_CACHE_DIR=/tmp/numba-cache
# libgomp: LightGBM's OpenMP runtime (not in its wheel).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libgomp1 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --home-dir /nonexistent --shell /usr/sbin/nologin ltr \
 && mkdir -p /registry /data /tmp/ltr-nightly && chown ltr:ltr /registry /data /tmp/ltr-nightly
COPY --from=build-trainer /opt/ltr /opt/ltr
USER 10001:10001
CMD ["ltr", "nightly", "--config", "/etc/ltr/nightly.toml", "--loop"]
