"""Free loopback ports, picked below the kernel's ephemeral range so that outgoing
connections (which take ephemeral ports) cannot squat a port we remembered."""

from __future__ import annotations

import random
import socket
from collections.abc import Iterable
from pathlib import Path

HOST = "127.0.0.1"
_LOWEST = 15000


def port_is_free(port: int, host: str = HOST) -> bool:
    """Bindable the way our servers bind (SO_REUSEADDR, so TIME_WAIT leftovers do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return low if low > _LOWEST + 1000 else 32768


def pick_ports(count: int, avoid: Iterable[int] = ()) -> list[int]:
    """`count` distinct free ports, none of them in `avoid` (ports other services remembered)."""
    taken = set(avoid)
    chosen: list[int] = []
    high = _ephemeral_low() - 1
    rng = random.Random()
    for _ in range(count * 200):
        if len(chosen) == count:
            break
        port = rng.randint(_LOWEST, high)
        if port in taken:
            continue
        if port_is_free(port):
            taken.add(port)
            chosen.append(port)
    while len(chosen) < count:  # crowded machine: let the kernel pick
        with socket.socket() as sock:
            sock.bind((HOST, 0))
            port = sock.getsockname()[1]
        if port not in taken:
            taken.add(port)
            chosen.append(port)
    return chosen
