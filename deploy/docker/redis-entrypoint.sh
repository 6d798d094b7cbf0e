#!/bin/sh
# As redis:7's own entrypoint: options alone (Kubernetes `args: ["--save", ""]`) run
# redis-server with them; it listens on every interface without protected mode, as that image
# does (a container's network is its boundary), unless the options say otherwise.
set -e
if [ -z "$1" ] || [ "${1#-}" != "$1" ]; then
  set -- redis-server "$@"
fi
if [ "$1" = redis-server ]; then
  shift
  set -- redis-server --bind 0.0.0.0 --protected-mode no "$@"
fi
exec "$@"
