#!/bin/sh
# Entrypoint of the kvstash image.
#
#   entrypoint.sh [--dry-run] [kvstashd] [DAEMON FLAGS...]   run the daemon
#   entrypoint.sh [--dry-run] COMMAND [ARGS...]               run anything else
#
# For the daemon it asks kvstashd itself for the effective configuration
# (flags > KVSTASH_* > config file > defaults, via --print-config), creates
# and checks the directory of an ipc:// socket, warns when the memlock limit
# is below the L1 pool that the CUDA backend pins, then execs kvstashd: it
# replaces this shell and receives SIGTERM from `docker stop` directly. Any
# other command (`kvstash ping`, `sleep infinity`) is exec'ed as is.
#
# Every path comes from the environment so that tests run this script
# outside a container, against stub binaries:
#   KVSTASH_BIN_DIR          where kvstashd and kvstash are    (/usr/local/bin)
#   KVSTASH_DEFAULT_CONFIG   config file used when it exists and KVSTASH_CONFIG
#                            is unset                  (/etc/kvstash/kvstash.conf)
#   KVSTASH_SOCKET_DIR_MODE  mode of a socket directory this script creates
#                            (2750: engines in the group may connect)
#   KVSTASH_DRY_RUN=1        same as --dry-run: do every check, then print the
#                            command instead of exec'ing it
# The socket directory is the directory of the effective `socket`
# (KVSTASH_SOCKET, --socket or the config file), so it cannot disagree with
# what the daemon binds.
set -eu

KVSTASH_BIN_DIR=${KVSTASH_BIN_DIR:-/usr/local/bin}
KVSTASH_DEFAULT_CONFIG=${KVSTASH_DEFAULT_CONFIG:-/etc/kvstash/kvstash.conf}
KVSTASH_SOCKET_DIR_MODE=${KVSTASH_SOCKET_DIR_MODE:-2750}
dry_run=${KVSTASH_DRY_RUN:-0}

log() { printf 'kvstash-entrypoint: %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# Prints the command as one line of shell words, or execs it.
run() {
  if [ "$dry_run" = 1 ]; then
    line='exec'
    for word in "$@"; do
      case $word in
        '' | *[!A-Za-z0-9_./:=@%+,-]*)
          word="'$(printf '%s' "$word" | sed "s/'/'\\\\''/g")'" ;;
      esac
      line="$line $word"
    done
    printf '%s\n' "$line"
    exit 0
  fi
  exec "$@"
}

# The value of `key` in --print-config output ("key = value" or
# key = "value").
config_value() {
  printf '%s\n' "$effective_config" | sed -n "s/^$1 = \"\{0,1\}\([^\"]*\)\"\{0,1\}\$/\1/p"
}

prepare_socket_dir() {
  socket=$(config_value socket)
  case $socket in
    ipc://*) path=${socket#ipc://} ;;
    *) return 0 ;;  # tcp:// needs no directory
  esac
  # sockaddr_un.sun_path holds 107 bytes and a NUL.
  if [ "${#path}" -gt 107 ]; then
    die "socket path $path is ${#path} bytes; a Unix socket path holds at most 107"
  fi
  dir=$(dirname -- "$path")
  if [ ! -d "$dir" ]; then
    (umask 027 && mkdir -p -- "$dir") ||
      die "cannot create the socket directory $dir (uid $(id -u)); mount a volume there"
    chmod "$KVSTASH_SOCKET_DIR_MODE" "$dir" ||
      die "cannot chmod $KVSTASH_SOCKET_DIR_MODE the socket directory $dir"
    log "created socket directory $dir (mode $KVSTASH_SOCKET_DIR_MODE)"
  fi
  if [ ! -w "$dir" ] || [ ! -x "$dir" ]; then
    die "socket directory $dir is not writable by uid $(id -u) gid $(id -g):" \
      "chown it to that user or group (e.g. chown $(id -u):$(id -g) on the host path)," \
      "or use a named volume, which takes the image's /run/kvstash ownership"
  fi
  if [ -e "$path" ] && [ ! -S "$path" ]; then
    die "$path exists and is not a socket; refusing to let the daemon replace it"
  fi
  # Engines that are not root (nor this uid) reach the socket through the
  # group: it needs search permission on the directory.
  mode=$(stat -c %a "$dir" 2>/dev/null || true)
  group_digit=${mode%?}
  group_digit=${group_digit#"${group_digit%?}"}
  case $group_digit in
    '' | 1 | 3 | 5 | 7) ;;
    *) log "warning: socket directory $dir has mode $mode: engines that are neither root" \
      "nor uid $(id -u) cannot reach the socket; give the directory's group g+x" ;;
  esac
}

# Pinned memory can count against RLIMIT_MEMLOCK (always for mlock and RDMA
# registration; for cudaHostRegister depending on driver and kernel), and
# containers default to 64 KiB or 8 MiB. The host backend does not pin.
check_memlock() {
  backend=$(config_value backend)
  [ "$backend" = host ] && return 0
  # Not in POSIX, but in every sh an image ships (dash, busybox ash, bash).
  # shellcheck disable=SC3045
  limit_kib=$(ulimit -l)
  [ "$limit_kib" = unlimited ] && return 0
  l1_gb=$(config_value l1-gb)
  pool_kib=$(awk -v gb="$l1_gb" 'BEGIN { printf "%.0f", gb * 1048576 }')
  if awk -v limit="$limit_kib" -v pool="$pool_kib" 'BEGIN { exit !(limit < pool) }'; then
    log "WARNING: memlock limit (ulimit -l) is $limit_kib KiB, but the L1 pool is" \
      "$l1_gb GiB ($pool_kib KiB) of pinned memory."
    log "WARNING: pinning the pool (backend $backend) can fail once the limit is" \
      "reached; slices that fail to pin are not used, so the cache is smaller than configured."
    log "WARNING: raise the limit: docker run --ulimit memlock=-1, compose" \
      "'ulimits: memlock: -1', Kubernetes: a runtime/node default of unlimited" \
      "(see docs/deployment.md)."
  fi
}

if [ "${1:-}" = --dry-run ]; then
  dry_run=1
  shift
fi

# No command, or flags only: the daemon.
case ${1:-} in
  '' | -*) set -- kvstashd "$@" ;;
esac

if [ "$1" != kvstashd ] && [ "$1" != "$KVSTASH_BIN_DIR/kvstashd" ]; then
  # Passthrough: our binaries by name, anything else through PATH.
  if [ -x "$KVSTASH_BIN_DIR/$1" ]; then
    program=$KVSTASH_BIN_DIR/$1
    shift
    set -- "$program" "$@"
  fi
  run "$@"
fi
shift
daemon=$KVSTASH_BIN_DIR/kvstashd
[ -x "$daemon" ] || die "$daemon not found or not executable (KVSTASH_BIN_DIR=$KVSTASH_BIN_DIR)"

if [ -z "${KVSTASH_CONFIG:-}" ] && [ -f "$KVSTASH_DEFAULT_CONFIG" ]; then
  export KVSTASH_CONFIG="$KVSTASH_DEFAULT_CONFIG"
  log "using config file $KVSTASH_CONFIG"
fi

# --help and --version print and exit: nothing to prepare.
for arg in "$@"; do
  case $arg in
    -h | --help | --help-all | --version | --print-config) run "$daemon" "$@" ;;
  esac
done

# The daemon validates every flag, variable and config key here; a bad one
# stops the container with the daemon's own message.
status=0
effective_config=$("$daemon" "$@" --print-config) || status=$?
if [ "$status" -ne 0 ]; then
  log "kvstashd rejected its configuration (exit $status)"
  exit "$status"
fi

prepare_socket_dir
check_memlock
run "$daemon" "$@"
