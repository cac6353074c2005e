"""The SAM CLI with one fix for Docker daemons that publish ports through the userland proxy
(any daemon started with --iptables=false, as scripts/sam-local.sh starts its own).

Before it sends an invocation, SAM waits until a TCP connect to the container's published
port succeeds. The userland proxy accepts that connect at once, before the Lambda runtime
emulator inside the (here emulated, so slow to start) container listens; SAM then sends the
event into a closed connection, reports "No response from invoke container" and waits out the
function's whole timeout. Here "ready" means the emulator answered an HTTP request. Used as
`python scripts/sam_ready.py <sam arguments>`; nothing else changes.
"""

import socket
import sys

from samcli.local.docker import container


def _emulator_answers(self) -> bool:
    try:
        with socket.create_connection(
            (self._container_host, self.rapid_port_host), timeout=1
        ) as s:
            s.settimeout(1)
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            return bool(s.recv(1))
    except OSError:
        return False


container.Container._can_connect_to_socket = _emulator_answers

if __name__ == "__main__":
    from samcli.cli.main import cli

    sys.argv[0] = "sam"
    sys.exit(cli())
