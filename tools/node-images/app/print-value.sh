#!/bin/sh
# The real-node tests' application: prints the value it was started with (envFrom) once, and
# the mounted file's content each time it changes, each line prefixed so the test can tell
# them apart. Nothing else is printed. With APP_CRASH_ON set, a value starting with it makes
# the application exit at once, as one that cannot use a bad value would (S6.5's stall).
if [ -n "$APP_CRASH_ON" ]; then
  case "$APP_VALUE" in
    "$APP_CRASH_ON"*) exit 3 ;;
  esac
fi
echo "env $APP_VALUE"
file=${APP_VALUE_FILE:-/etc/app/value}
last=""
while true; do
  now=$(cat "$file" 2>/dev/null)
  if [ "$now" != "$last" ]; then
    echo "file $now"
    last=$now
  fi
  sleep 1
done
