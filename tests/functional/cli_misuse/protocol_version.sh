#!/usr/bin/env bash
# A CLI and a daemon of different builds refuse each other with a message that names both
# protocol versions and what to restart, instead of "bad request": a request without a version
# (an older CLI) or with another one is refused by the daemon; a response without one (an older
# daemon, played here by a few lines of python) is refused by the CLI. `tarn version` reports
# both sides, and `ping` and `tarn daemon --stop` work across builds.
. "$STF_SUITE/include/libtest.sh"
log_assert "CLI and daemon of different protocol versions refuse each other clearly"
require_python

# This build's protocol version (tarn_protocol::PROTOCOL_VERSION).
protocol=7

default_setup
log_must tarn version
stdout_has "(protocol $protocol)"
stdout_has "daemon $(daemon_pid) on $TARN_SOCKET: tarn"

# Requests as an older or a newer CLI writes them, straight to the daemon's socket.
ask_raw() {
	python3 - "$TARN_SOCKET" "$1" <<'PY'
import json, socket, sys
conn = socket.socket(socket.AF_UNIX)
conn.connect(sys.argv[1])
conn.sendall(sys.argv[2].encode() + b"\n")
answer = b""
while not answer.endswith(b"\n"):
    chunk = conn.recv(65536)
    if not chunk:
        break
    answer += chunk
response = json.loads(answer)
print(response["status"], response.get("protocol"), response["stderr"].strip())
PY
}
status_args='"verb":"pool","args":{"verb":"status","args":{"pool":null,"verbose":false}}'
# Protocol 1 named verbs flat ("pool scrub"); this build nests them by family.
old_scrub='"protocol":1,"verb":"pool scrub","args":{"pool":"x","action":"start"}'
answer=$(ask_raw "{$status_args}")
log_note "no version: $answer"
case $answer in
"2 $protocol tarn: bad request: this command is a different build of tarn (a build from before protocol versions)"*"tarn daemon --stop"*) ;;
*) log_fail "a request without a version: $answer" ;;
esac
newer=$((protocol + 1))
answer=$(ask_raw "{\"protocol\":$newer,$status_args}")
case $answer in
"2 $protocol tarn: bad request: this command is a different build of tarn (protocol $newer)"*) ;;
*) log_fail "a request of protocol $newer: $answer" ;;
esac
answer=$(ask_raw "{$old_scrub}")
case $answer in
"2 $protocol tarn: bad request: this command is a different build of tarn (protocol 1)"*"tarn daemon --stop"*) ;;
*) log_fail "a request of protocol 1, in its shape: $answer" ;;
esac
answer=$(ask_raw "{\"protocol\":$protocol,$status_args}")
case $answer in
"0 $protocol"*) ;;
*) log_fail "a request of this protocol: $answer" ;;
esac
answer=$(ask_raw '{"verb":"ping"}')
case $answer in
"0 $protocol"*) ;;
*) log_fail "a ping without a version: $answer" ;;
esac
verify_pool "$TESTPOOL"

# An older daemon: answers every line with a response that has no protocol version.
old_socket=$SCRATCH/old.sock
python3 - "$old_socket" <<'PY' &
import json, os, socket, sys
path = sys.argv[1]
server = socket.socket(socket.AF_UNIX)
server.bind(path)
server.listen(8)
while True:
    conn, _ = server.accept()
    line = conn.makefile("rb").readline()
    request = json.loads(line)
    data = {"pid": os.getpid(), "socket": path, "pools": []}
    conn.sendall(json.dumps({"status": 0, "stdout": "", "stderr": "", "data": data}).encode() + b"\n")
    conn.close()
    if request.get("verb") == "stop":
        os.unlink(path)
        break
PY
old_daemon=$!
wait_for 10 "test -S $old_socket" || log_fail "the fake daemon did not start"
log_mustnot_msg "different build (a build from before protocol versions)" tarn --socket "$old_socket" pool status
stderr_has "tarn daemon --stop"
log_must tarn --socket "$old_socket" version
stdout_has "daemon $old_daemon on $old_socket: a build from before protocol versions"
kill "$old_daemon" 2>/dev/null
wait "$old_daemon" 2>/dev/null
log_pass
