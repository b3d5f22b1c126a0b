"""A writer that pauses past its lease and is fenced off when it wakes up.

    TENURE_ENDPOINTS=127.0.0.1:7400 python3 paused_writer.py demo/lease demo/report

It takes the lease, writes "A-1" through the fenced store, prints a line
and waits for a line on stdin. Freeze it meanwhile (kill -STOP PID) for
longer than the TTL, let another holder take the lease and write, thaw it
(kill -CONT PID) and press Enter: it tries to write "A-2" with its old
token, as a process that never noticed its pause would, and the store
refuses it. Each step is printed as one JSON line. Exit 0 when the late
write was refused, 1 if it was accepted.
"""

import json
import os
import sys

import tenure


def say(**event):
    print(json.dumps(event), flush=True)


def main() -> int:
    lease_name, key = sys.argv[1], sys.argv[2]
    ttl = float(sys.argv[3]) if len(sys.argv) > 3 else 2.0
    client = tenure.Client.from_env()  # TENURE_ENDPOINTS, TENURE_CACERT, TENURE_AUTH_TOKEN, ...
    session = client.session(holder="A", ttl=ttl)
    lease = session.acquire(lease_name)
    lease.put(key, "A-1")
    say(event="wrote", value="A-1", token=lease.token, pid=os.getpid())

    sys.stdin.readline()  # frozen here by the demo, for longer than the TTL

    # The session noticed on waking that the deadline passed...
    say(event="woke", done=lease.done.is_set(), state=lease.state)
    # ...but a process that does not look writes anyway, with its old token.
    try:
        client.put(key, "A-2", lease.name, lease.token)
    except tenure.StaleTokenError as e:
        say(event="refused", token=lease.token, error=str(e))
        return 0
    finally:
        session.orphan()
    say(event="accepted", token=lease.token)
    return 1


if __name__ == "__main__":
    sys.exit(main())
