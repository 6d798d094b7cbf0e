#!/usr/bin/env bash
# Builds local stand-ins for the two images docker-compose.yml and the Dockerfile pull from
# Docker Hub (python:3.11-slim, redis:7-alpine), for machines that cannot reach Docker Hub:
# a Debian bookworm root filesystem made with debootstrap (python3 and venv, CA certificates),
# imported with `docker import`, and a Redis image built on top of it from Debian's package.
#
#   sudo deploy/docker/build-base-images.sh            # then:
#   export PYTHON_IMAGE=ltr-local/python:3.11 REDIS_IMAGE=ltr-local/redis:7
#   docker compose up --build                          # or: make compose-smoke
#
# Environment: MIRROR (Debian mirror, default http://deb.debian.org/debian), SUITE (bookworm),
# CA_BUNDLE (a PEM bundle copied into the images so pip and apt trust a TLS-inspecting proxy;
# default: the host's /etc/ssl/certs/ca-certificates.crt), PYTHON_IMAGE, REDIS_IMAGE (tags).
set -euo pipefail

MIRROR=${MIRROR:-http://deb.debian.org/debian}
SUITE=${SUITE:-bookworm}
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
PYTHON_IMAGE=${PYTHON_IMAGE:-ltr-local/python:3.11}
REDIS_IMAGE=${REDIS_IMAGE:-ltr-local/redis:7}
here=$(cd "$(dirname "$0")" && pwd)

if [ "$(id -u)" != 0 ]; then
  echo "debootstrap needs root: run this script with sudo" >&2
  exit 1
fi
command -v debootstrap >/dev/null || { echo "install debootstrap (apt-get install debootstrap)" >&2; exit 1; }
command -v docker >/dev/null || { echo "install Docker (apt-get install docker.io)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"

if docker image inspect "$PYTHON_IMAGE" >/dev/null 2>&1 && [ "${REBUILD:-0}" != 1 ]; then
  echo "== $PYTHON_IMAGE exists (REBUILD=1 to make it anew)"
else
  echo "== debootstrap $SUITE from $MIRROR (a few minutes)"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$SUITE" "$rootfs" "$MIRROR"
  # What python:3.11-slim has that the images rely on: a `python` command, the host's CA bundle
  # (so pip reaches PyPI through an inspecting proxy), no apt lists or caches.
  ln -sf python3 "$rootfs/usr/bin/python"
  if [ -f "$CA_BUNDLE" ]; then
    cp "$CA_BUNDLE" "$rootfs/usr/local/share/ca-bundle.crt"
    cat "$CA_BUNDLE" >> "$rootfs/etc/ssl/certs/ca-certificates.crt"
  fi
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
  echo "== docker import → $PYTHON_IMAGE"
  tar -C "$rootfs" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    --change 'ENV REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt' \
    --change 'CMD ["python3"]' \
    - "$PYTHON_IMAGE"
fi

echo "== $REDIS_IMAGE from Debian's redis-server on $PYTHON_IMAGE"
docker build --quiet --build-arg BASE_IMAGE="$PYTHON_IMAGE" -t "$REDIS_IMAGE" \
  -f "$here/redis.Dockerfile" "$here"

docker image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}' | grep -E "^(${PYTHON_IMAGE}|${REDIS_IMAGE})  "
echo "export PYTHON_IMAGE=$PYTHON_IMAGE REDIS_IMAGE=$REDIS_IMAGE"
