# syntax=docker/dockerfile:1.7
# Three stages: `build` makes wheels (the only stage with a compiler), `serve` is the API image
# (no compiler, no torch, no LightGBM), `trainer` runs the nightly job (train + dnn extras).

FROM python:3.11-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
COPY trainer ./trainer
RUN pip wheel --no-cache-dir --wheel-dir /wheels/serve ".[serve]" \
 && pip wheel --no-cache-dir --wheel-dir /wheels/trainer ".[serve,train,dnn]" \
      --extra-index-url https://download.pytorch.org/whl/cpu

FROM python:3.11-slim AS serve
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    LTR_REGISTRY=/registry LTR_HOST=0.0.0.0 LTR_PORT=8000 LTR_WORKERS=2 \
    NUMBA_CACHE_DIR=/tmp/numba-cache
COPY --from=build /wheels/serve /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels "ltr-rerank[serve]" \
 && rm -rf /wheels \
 && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin ltr \
 && mkdir -p /registry && chown ltr /registry
USER ltr
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/livez', timeout=2).status == 200 else 1)"]
CMD ["ltr", "serve"]

FROM python:3.11-slim AS trainer
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 LTR_REGISTRY=/registry \
    NUMBA_CACHE_DIR=/tmp/numba-cache
COPY --from=build /wheels/trainer /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels "ltr-rerank[serve,train,dnn]" \
 && rm -rf /wheels \
 && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin ltr \
 && mkdir -p /registry /data && chown ltr /registry /data
USER ltr
CMD ["ltr", "nightly", "--config", "/etc/ltr/nightly.toml", "--loop"]
