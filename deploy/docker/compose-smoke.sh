#!/usr/bin/env bash
# `make compose-smoke`: docker-compose.yml for real. Builds the images, starts the stack, waits
# for the API to be ready, reranks, publishes a new model version through the trainer container,
# waits for the API to swap to it, publishes `demo-items` (its item set made live in Redis) and
# reranks by id from Redis, restarts the Redis container and checks that its data survived
# (the same keys, the same live item set, answers by id not degraded), and tears everything
# down (volumes too), pass or fail.
#
# Works with Compose v2 (`docker compose`) and docker-compose 1.29. Uses PYTHON_IMAGE,
# REDIS_IMAGE, TRAINER_EXTRAS and TORCH_INDEX_URL like docker-compose.yml; without Docker Hub,
# run deploy/docker/build-base-images.sh first and export what it prints.
# LTR_HTTP_PORT (default: a free port), COMPOSE_PROJECT_NAME (default ltr-smoke-<pid>) and
# LTR_IMAGE_TAG (default smoke-<pid>, its images removed at the end) keep it clear of a stack
# already running.
set -euo pipefail
cd "$(dirname "$0")/../.."

if docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
elif command -v docker-compose >/dev/null; then
  compose=(docker-compose)
else
  echo "compose-smoke: neither 'docker compose' nor docker-compose is installed" >&2
  exit 2
fi
docker info >/dev/null 2>&1 || { echo "compose-smoke: no Docker daemon reachable" >&2; exit 2; }

export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-ltr-smoke-$$}
export LTR_HTTP_PORT=${LTR_HTTP_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
# Its own image tag too (removed at the end): under `latest` it re-tagged the images of a stack
# already running from another checkout, which its next `up` then ran (a trial).
own_tag=${LTR_IMAGE_TAG:+no}
export LTR_IMAGE_TAG=${LTR_IMAGE_TAG:-smoke-$$}
api="http://127.0.0.1:${LTR_HTTP_PORT}"
READY_TIMEOUT=${READY_TIMEOUT:-600}
SWAP_TIMEOUT=${SWAP_TIMEOUT:-120}
REDIS_TIMEOUT=${REDIS_TIMEOUT:-60}
started=$(date +%s)
step() { printf '== [%4ss] %s\n' "$(( $(date +%s) - started ))" "$*"; }

teardown() {
  status=$?
  if [ "$status" != 0 ]; then
    step "FAILED ($status): the stack's logs"
    "${compose[@]}" ps || true
    "${compose[@]}" logs --tail 60 || true
  fi
  step "tearing down $COMPOSE_PROJECT_NAME"
  "${compose[@]}" down --volumes --remove-orphans --timeout 20 >/dev/null 2>&1 || true
  if [ -z "$own_tag" ]; then
    docker rmi "${LTR_IMAGE_PREFIX:-ltr-rerank}-serve:$LTR_IMAGE_TAG" \
      "${LTR_IMAGE_PREFIX:-ltr-rerank}-trainer:$LTR_IMAGE_TAG" >/dev/null 2>&1 || true
  fi
  exit "$status"
}
trap teardown EXIT

# GET/POST with a deadline of its own; prints the body, fails on a non-2xx status.
http() { python3 - "$@" <<'PY'
import sys, urllib.request
url, body = sys.argv[1], (sys.argv[2].encode() if len(sys.argv) > 2 else None)
req = urllib.request.Request(url, data=body, headers={"content-type": "application/json"})
with urllib.request.urlopen(req, timeout=10) as resp:
    sys.stdout.write(resp.read().decode())
PY
}
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1], {}, {'d': d}))" "$1"; }

step "building the images (${compose[*]}, PYTHON_IMAGE=${PYTHON_IMAGE:-python:3.11-slim})"
"${compose[@]}" build
docker image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}' \
  | grep -E "^${LTR_IMAGE_PREFIX:-ltr-rerank}-(serve|trainer):${LTR_IMAGE_TAG} " || true

step "starting the stack (project $COMPOSE_PROJECT_NAME, API on port $LTR_HTTP_PORT)"
"${compose[@]}" up -d

step "waiting for $api/readyz (trainer-init trains the demo model first)"
deadline=$(( $(date +%s) + READY_TIMEOUT ))
until http "$api/readyz" >/dev/null 2>&1; do
  if [ "$(date +%s)" -gt "$deadline" ]; then echo "not ready within ${READY_TIMEOUT}s" >&2; exit 1; fi
  sleep 2
done
before=$(http "$api/models" | json "d['models'][0]['name'] + '/' + d['models'][0]['version']")
step "ready, serving $before"

step "reranking"
ranked=$(http "$api/rerank" "$(python3 -c 'import json; print(json.dumps(json.load(open("docs/examples/rerank.json"))))')")
echo "$ranked"
order=$(echo "$ranked" | json "','.join(str(r['id']) for r in d['results'])")
scores=$(echo "$ranked" | json "len({r['score'] for r in d['results']})")
[ "$scores" -gt 1 ] || { echo "every candidate got the same score" >&2; exit 1; }
[ "$order" != "$(json "','.join(str(c['id']) for c in d['candidates'])" < docs/examples/rerank.json)" ] \
  || { echo "the answer kept the input order" >&2; exit 1; }

model=${before%%/*}
step "publishing a new version of $model through the trainer container"
"${compose[@]}" run --rm --no-deps trainer sh -c '
  set -e
  demo=$(python -c "import pathlib, trainer; print(pathlib.Path(trainer.__file__).parent / \"demo_data\")")
  ltr train --train "$demo/rank.train" --valid "$demo/rank.test" --num-trees 30 \
            --name '"$model"' --out /tmp/smoke-model
  ltr publish --model /tmp/smoke-model --registry /registry'

step "waiting for the API to swap from $before"
deadline=$(( $(date +%s) + SWAP_TIMEOUT ))
while :; do
  now=$(http "$api/models" | json "d['models'][0]['name'] + '/' + d['models'][0]['version']")
  [ "$now" != "$before" ] && break
  if [ "$(date +%s)" -gt "$deadline" ]; then echo "still $before after ${SWAP_TIMEOUT}s" >&2; exit 1; fi
  sleep 1
done
step "swapped to $now"
http "$api/rerank" "$(cat docs/examples/rerank.json)" | json "d['model']"

# Redis's data across a restart of its container: the item set of a model that reads its item
# features from Redis, published the way production does (`ltr publish` with LTR_REDIS_URL).
redis_cli() { "${compose[@]}" exec -T redis redis-cli "$@" | tr -d '\r'; }
items_request='{"model": "demo-items", "candidates": [{"id": "doc-3007"},
  {"id": "doc-3005", "features": {"f12": 0.51, "f17": 0.45}}, {"id": "doc-3006"}]}'
# Reranks by id until an answer is not degraded (a worker's pooled connection to a restarted
# Redis is retried, its breaker may need a moment); data lost in Redis fails at once.
rerank_items_from_redis() {
  local deadline=$(( $(date +%s) + REDIS_TIMEOUT )) answer reasons
  while :; do
    answer=$(http "$api/rerank" "$items_request" 2>&1) || answer='{"degraded": true, "reasons": ["http error"]}'
    reasons=$(echo "$answer" | json "','.join(d.get('reasons', []))" 2>/dev/null || echo "bad answer")
    case ",$reasons," in
      *,item_set_missing_in_redis,*|*,item_rows_lost_in_redis,*|*,item_set_mismatch,*)
        echo "$answer" >&2; echo "Redis lost the item set: $reasons" >&2; return 1 ;;
    esac
    if [ "$(echo "$answer" | json "d.get('degraded')" 2>/dev/null)" = False ] && [ -z "$reasons" ]; then
      echo "$answer"; return 0
    fi
    echo "  degraded ($reasons), again" >&2
    if [ "$(date +%s)" -gt "$deadline" ]; then
      echo "$answer" >&2; echo "still degraded after ${REDIS_TIMEOUT}s" >&2; return 1
    fi
    sleep 1
  done
}

step "publishing demo-items (item features from Redis) through the trainer container"
"${compose[@]}" run --rm --no-deps trainer sh -c '
  set -e
  python - <<PY
from pathlib import Path
import trainer
from trainer.data.loader import load_dataset
from trainer.features.demo import train_demo_items
from trainer.lambdamart.params import LambdaMARTParams
demo = Path(trainer.__file__).parent / "demo_data"
train = load_dataset(demo / "rank.train")
test = load_dataset(demo / "rank.test", num_features=train.num_features, feature_names=train.names())
train_demo_items(train, test, Path("/tmp/demo-items"), LambdaMARTParams(num_trees=30))
PY
  ltr publish --model /tmp/demo-items --registry /registry'
item_set=$(redis_cli GET "ltr:itemset:demo-catalog")
[ -n "$item_set" ] || { echo "the publish made no item set live in Redis" >&2; exit 1; }
deadline=$(( $(date +%s) + SWAP_TIMEOUT ))
until http "$api/models" | json "'demo-items' in [m['name'] for m in d['models']]" | grep -qx True; do
  if [ "$(date +%s)" -gt "$deadline" ]; then echo "demo-items not loaded after ${SWAP_TIMEOUT}s" >&2; exit 1; fi
  sleep 1
done
step "demo-items served, item set demo-catalog@$item_set live in Redis; reranking by id"
rerank_items_from_redis

config=$(redis_cli CONFIG GET '*' | paste -sd' ')
for want in "appendonly yes" "appendfsync everysec" "dir /data" "maxmemory-policy volatile-lru"; do
  case " $config " in *" $want "*) ;; *) echo "Redis runs without $want" >&2; exit 1 ;; esac
done
keys=$(redis_cli DBSIZE)
run_id=$(redis_cli INFO server | sed -n 's/^run_id://p')
[ "$keys" -gt 0 ] || { echo "Redis holds no key" >&2; exit 1; }
step "Redis holds $keys keys ($(redis_cli INFO memory | sed -n 's/^used_memory_human://p') used); restarting its container"
"${compose[@]}" restart redis
redis_container=$("${compose[@]}" ps -q redis)
deadline=$(( $(date +%s) + REDIS_TIMEOUT ))
until [ "$(docker inspect -f '{{.State.Health.Status}}' "$redis_container")" = healthy ]; do
  if [ "$(date +%s)" -gt "$deadline" ]; then echo "Redis not healthy ${REDIS_TIMEOUT}s after its restart" >&2; exit 1; fi
  sleep 1
done
[ "$(redis_cli INFO server | sed -n 's/^run_id://p')" != "$run_id" ] \
  || { echo "Redis did not restart (same run_id)" >&2; exit 1; }
after=$(redis_cli DBSIZE)
step "Redis healthy again (a new process) with $after keys"
[ "$after" = "$keys" ] || { echo "Redis held $keys keys before its restart, $after after" >&2; exit 1; }
[ "$(redis_cli GET "ltr:itemset:demo-catalog")" = "$item_set" ] \
  || { echo "the live item set is no longer demo-catalog@$item_set" >&2; exit 1; }
rerank_items_from_redis
# Two models now: the example names its own.
http "$api/rerank" "$(python3 -c 'import json, sys; d = json.load(open("docs/examples/rerank.json")); d["model"] = sys.argv[1]; print(json.dumps(d))' "$model")" \
  | json "d['model']"
step "Redis kept its data across the restart"

step "metrics from the two workers, summed"
http "$api/metrics" | grep -E '^ltr_http_requests_total\{.*route="/rerank"' || true

step "compose smoke test passed"
