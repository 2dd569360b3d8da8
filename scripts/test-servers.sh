#!/usr/bin/env bash
# make test-servers: the acceptance suites (the tests that run on every
# topology: one server, Redis Cluster, Sentinel), and the cluster's and
# Sentinel's own tests, on every server and mode django_rl is tested on.
# Each run starts and stops its own servers (tests/support/servers.py says how the
# environment variables choose them); Redis 7.0 in its default mode is
# `make test`'s. Runs one after another: the suites time windows to 100 ms
# and share 2 cores badly.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
export PYTHON

scripts/fetch-test-servers.sh .servers || exit 1

# server:mode (see tests/support/servers.py)
RUNS=${TEST_SERVERS_RUNS:-"redis-6.2: redis-8.0: valkey-9: redis:acl redis-8.0:tls redis:app-clock redis-6.2:app-clock"}
failed=()
summary=()
for run in $RUNS; do
  server=${run%%:*}
  mode=${run#*:}
  echo "=== acceptance suites on $server${mode:+ ($mode)} ==="
  started=$(date +%s)
  # The cluster's and Sentinel's own tests look into django_rl's connections
  # with commands of their own (CLIENT ID, the Django cache): not as the
  # least-privilege user. They run on every server version.
  case $mode in
    *acl* | *tls*) marks="acceptance" ;;
    *) marks="acceptance or topologies" ;;
  esac
  # shellcheck disable=SC2086
  DJANGO_RL_TEST_SERVER=$server DJANGO_RL_TEST_MODE=$mode \
    "$PYTHON" -m pytest -m "$marks" -q ${PYTEST_ARGS:-}
  status=$?
  took=$(($(date +%s) - started))
  if [ "$status" -eq 0 ]; then
    summary+=("passed  $server${mode:+ ($mode)} in ${took}s")
  else
    summary+=("FAILED  $server${mode:+ ($mode)} in ${took}s")
    failed+=("$run")
  fi
done
echo "=== test-servers ==="
printf '%s\n' "${summary[@]}"
[ ${#failed[@]} -eq 0 ]
