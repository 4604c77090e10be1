#!/usr/bin/env bash
# Idempotent: the real SSH server the ssh driver's tests run against. Installs
# openssh-server/openssh-client when missing, creates an unprivileged test user, generates
# a host key and a client key under a state directory, starts `sshd -f <own config>` on
# 127.0.0.1 on a free port, and writes what the tests read:
#
#   $STATE/env          ENVRT_TEST_SSH_HOST/PORT/USER/KEY/KNOWN_HOSTS, one per line
#   $STATE/known_hosts  the host key, for strict host-key checking
#   $STATE/id_ed25519   the test user's private key (readable by root only)
#
#   env: ENVRT_TEST_SSH_STATE (default /var/lib/envrt-test-ssh), ENVRT_TEST_SSH_USER
#        (default envrt-ssh). Run as root (as anyone else it only says it cannot);
#        later runs only check.
set -euo pipefail

STATE="${ENVRT_TEST_SSH_STATE:-/var/lib/envrt-test-ssh}"
USER_NAME="${ENVRT_TEST_SSH_USER:-envrt-ssh}"

if [ "$(id -u)" != 0 ]; then
    # Not fatal: without the server the ssh tests skip loudly (and fail under
    # ENVRT_REQUIRE_SSH=1, as in CI, which runs as root).
    echo "start-sshd: not root, no test sshd started (the ssh tests will skip)" >&2
    exit 0
fi
if ! [ -x /usr/sbin/sshd ] || ! command -v ssh >/dev/null 2>&1; then
    echo "start-sshd: apt-get install openssh-server openssh-client"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq openssh-server openssh-client >/dev/null
fi

if ! id "$USER_NAME" >/dev/null 2>&1; then
    useradd --create-home --shell /bin/sh "$USER_NAME"
fi
# `*` rather than useradd's `!`: a locked account may not log in even by key without PAM.
usermod -p '*' "$USER_NAME"

install -d -m 0755 "$STATE" "$STATE/authorized_keys"
[ -f "$STATE/ssh_host_ed25519_key" ] || ssh-keygen -q -t ed25519 -N '' -C envrt-test-host -f "$STATE/ssh_host_ed25519_key"
[ -f "$STATE/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C envrt-test-client -f "$STATE/id_ed25519"
chmod 0600 "$STATE/id_ed25519" "$STATE/ssh_host_ed25519_key"
install -m 0644 "$STATE/id_ed25519.pub" "$STATE/authorized_keys/$USER_NAME"
install -d -m 0755 /run/sshd

answering() { [ -n "${1:-}" ] && (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The configuration for a port (one place, so a running server can be compared with it).
config_for() {
    local port=$1
    cat <<CONF
# The envrt test server (scripts/start-sshd.sh): key login of $USER_NAME only, on loopback.
Port $port
ListenAddress 127.0.0.1
HostKey $STATE/ssh_host_ed25519_key
PidFile $STATE/sshd.pid
AuthorizedKeysFile $STATE/authorized_keys/%u
AllowUsers $USER_NAME
PermitRootLogin no
PubkeyAuthentication yes
PasswordAuthentication no
# A remote account's ~/.ssh/rc runs before every session with the channel as its stdout,
# so it could shape what the driver reads (a sync out's archive): not on the test host.
PermitUserRC no
KbdInteractiveAuthentication no
UsePAM no
# The driver multiplexes every lease of a host over one connection.
MaxSessions 128
MaxStartups 64:30:128
LogLevel ERROR
CONF
}

port=""
[ -f "$STATE/env" ] && port="$(sed -n 's/^ENVRT_TEST_SSH_PORT=//p' "$STATE/env")"
if [ -f "$STATE/sshd.pid" ] && kill -0 "$(cat "$STATE/sshd.pid")" 2>/dev/null && answering "$port"; then
    # A server started with an older configuration re-reads the current one: SIGHUP makes
    # sshd re-execute itself with it, keeping the sessions it has.
    if [ "$(config_for "$port")" != "$(cat "$STATE/sshd_config")" ]; then
        config_for "$port" >"$STATE/sshd_config.new"
        /usr/sbin/sshd -t -f "$STATE/sshd_config.new"
        mv "$STATE/sshd_config.new" "$STATE/sshd_config"
        kill -HUP "$(cat "$STATE/sshd.pid")"
        for _ in $(seq 1 50); do
            sleep 0.1
            answering "$port" && break
        done
        answering "$port" || { echo "start-sshd: sshd does not answer on $port after reloading; see $STATE/sshd.log" >&2; exit 1; }
        echo "sshd on 127.0.0.1:$port reloaded with the current configuration"
        exit 0
    fi
    echo "sshd already answering on 127.0.0.1:$port"
    exit 0
fi

port=""
for candidate in $(seq 22022 22122); do
    if ! answering "$candidate"; then
        port=$candidate
        break
    fi
done
[ -n "$port" ] || { echo "start-sshd: no free port in 22022..22122" >&2; exit 1; }

config_for "$port" >"$STATE/sshd_config"

/usr/sbin/sshd -t -f "$STATE/sshd_config"
/usr/sbin/sshd -f "$STATE/sshd_config" -E "$STATE/sshd.log"
for _ in $(seq 1 50); do
    answering "$port" && break
    sleep 0.1
done
answering "$port" || { echo "start-sshd: sshd does not answer on $port; see $STATE/sshd.log" >&2; exit 1; }

echo "[127.0.0.1]:$port $(cut -d' ' -f1,2 "$STATE/ssh_host_ed25519_key.pub")" >"$STATE/known_hosts"
cat >"$STATE/env" <<ENV
ENVRT_TEST_SSH_HOST=127.0.0.1
ENVRT_TEST_SSH_PORT=$port
ENVRT_TEST_SSH_USER=$USER_NAME
ENVRT_TEST_SSH_KEY=$STATE/id_ed25519
ENVRT_TEST_SSH_KNOWN_HOSTS=$STATE/known_hosts
ENV
echo "sshd answering on 127.0.0.1:$port (test user $USER_NAME, state $STATE)"
