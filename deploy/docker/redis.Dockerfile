# A Redis image from Debian's redis-server package, for machines without Docker Hub
# (deploy/docker/build-base-images.sh builds it). Same contract as redis:7-alpine:
# `redis-server` on PATH, port 6379, redis-cli for the healthcheck, runs as user redis, and an
# entrypoint that takes options alone (`args: ["--save", ""]`) as redis-server's.
# /data is the working directory, a volume, and owned by redis, as in redis:7-alpine: a new
# Docker named volume mounted there copies that ownership, so redis (never root here, unlike
# redis:7-alpine's entrypoint, which chowns /data itself) can write its append-only file.
# Kubernetes volumes copy nothing: deploy/k8s/redis.yaml chowns its volume in an initContainer.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data \
 && chown redis:redis /data
COPY redis-entrypoint.sh /usr/local/bin/redis-entrypoint.sh
VOLUME /data
WORKDIR /data
USER redis
EXPOSE 6379
ENTRYPOINT ["/usr/local/bin/redis-entrypoint.sh"]
CMD ["redis-server"]
