"""Pod addresses that are not loopback: kube-apiserver refuses 127.0.0.0/8 in EndpointSlices (and so do
Endpoints), so each pod gets an address of a private /20 added to this machine's `lo` interface. A process
binds it like any local address, and nothing leaves the machine: `lo` routes only to itself.

(A network namespace with a veth pair per node would isolate pods further; the simulated engines run in the
harness's own process, which can only bind addresses of its own namespace, so they share `lo`.)
"""

from __future__ import annotations

import ipaddress
import logging
import subprocess
import threading

log = logging.getLogger(__name__)

# 10.244.0.0/16 is what kubeadm clusters give pods; each harness takes a /20 of it (4093 pods) that no other
# holds, so sixteen run side by side.
POOL = ipaddress.IPv4Network("10.244.0.0/16")
BLOCK = 20
DEVICE = "lo"


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=False)


def _taken() -> set[ipaddress.IPv4Network]:
    out = _ip("-4", "-o", "addr", "show", "dev", DEVICE).stdout
    nets = set()
    for word in out.split():
        if "/" in word and word[0].isdigit():
            address = ipaddress.ip_interface(word).ip
            if address in POOL:
                nets.add(ipaddress.IPv4Network(f"{address}/{BLOCK}", strict=False))
    return nets


class AddressPool:
    """Addresses of one /20 of POOL on `lo`: `take` adds one, `give` removes it, `close` removes all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: set[str] = set()
        self.subnet = self._claim()
        self._free = [str(h) for h in self.subnet.hosts()][1:]  # the first is the nodes'

    @staticmethod
    def _claim() -> ipaddress.IPv4Network:
        """A /20 nobody has an address in: its first is added at once, so a harness started beside this one
        sees it taken (a race between two that start together ends in `ip`'s 'exists', and a retry)."""
        for subnet in POOL.subnets(new_prefix=BLOCK):
            if subnet in _taken():
                continue
            first = f"{next(subnet.hosts())}/32"
            if _ip("addr", "add", first, "dev", DEVICE).returncode == 0:
                return subnet
        raise RuntimeError(f"no free /{BLOCK} in {POOL} on {DEVICE} (or `ip addr add` is not allowed: run as root)")

    @property
    def node_address(self) -> str:
        return str(next(self.subnet.hosts()))

    def take(self) -> str:
        with self._lock:
            if not self._free:
                raise RuntimeError(f"no free pod address left in {self.subnet}")
            address = self._free.pop(0)
            self._held.add(address)
        done = _ip("addr", "add", f"{address}/32", "dev", DEVICE)
        if done.returncode != 0 and "exists" not in done.stderr:
            raise RuntimeError(f"ip addr add {address}: {done.stderr.strip()}")
        return address

    def give(self, address: str) -> None:
        with self._lock:
            if address not in self._held:
                return
            self._held.discard(address)
            self._free.append(address)
        _ip("addr", "del", f"{address}/32", "dev", DEVICE)

    def close(self) -> None:
        with self._lock:
            held, self._held = set(self._held), set()
        for address in [*held, self.node_address]:
            _ip("addr", "del", f"{address}/32", "dev", DEVICE)
