#!/usr/bin/env bash
# Make sure the services the tests talk to are running: PostgreSQL (127.0.0.1:5432), Redis (6379) and
# RabbitMQ (5672). Each is started with the machine's own command when nothing listens on its port.
# (The S3 server, `weed mini`, is started by the test session itself.)
set -euo pipefail
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() { for _ in $(seq 1 120); do listening "$1" && return 0; sleep 0.5; done; echo "port $1 not up" >&2; return 1; }

if ! listening 5432; then
  echo "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main start
  wait_port 5432
fi
if ! listening 6379; then
  echo "starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  wait_port 6379
fi
if ! listening 5672; then
  echo "starting RabbitMQ"
  rabbitmq-server -detached
  wait_port 5672
fi
