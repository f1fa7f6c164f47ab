"""Hosts joined by a rate-limited network, on one machine (benchmarks and
tests of multi-node training).

On a single machine every rank's traffic crosses the loopback device, where
a transfer costs CPU time and no wire time: communication cannot hide
behind computation because there is nothing to wait for, and every process
has the same address. This module gives each host (a rank, or a node of
several ranks) its own Linux network namespace with an address of its own,
joined to the others through a bridge by a veth pair whose both ends are
shaped with a token-bucket filter (tc's tbf) to a given rate: each host has
its own link of that rate in each direction, as a NIC and a switch port
would give it, and a transfer waits on the link while the CPU is free.

Needs root, `ip` and `tc` (iproute2) and a kernel with network namespaces,
veth, bridges and the tbf qdisc. `EmulatedLink.unavailable()` says why it
cannot be used where it cannot.

    with EmulatedLink(hosts=2, rate="1gbit") as link:
        cmd = link.prefix(host) + [sys.executable, "rank.py"]
        env = {**os.environ, **link.env}
"""
import os
import shutil
import subprocess

# The interface each host sees (the same name in every namespace, so one
# GLOO_SOCKET_IFNAME serves all ranks).
INTERFACE = "tflink"
SUBNET = "10.213.0"


def _run(*cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip()}")


class EmulatedLink:
    def __init__(self, hosts, rate, burst="512kb"):
        if not 1 <= hosts <= 250:
            raise ValueError(f"{hosts} hosts: between 1 and 250")
        self.rate, self.burst = rate, burst
        tag = f"tilefuse-link-{os.getpid()}"
        self.bridge = f"{tag}-br"
        self.hosts = [f"{tag}-h{h}" for h in range(hosts)]
        self.env = {"GLOO_SOCKET_IFNAME": INTERFACE}

    @staticmethod
    def unavailable():
        """Why an emulated link cannot be set up here, or None (tried: one
        host at 1gbit, set up and torn down)."""
        if os.geteuid() != 0:
            return "needs root (network namespaces and qdiscs)"
        for tool in ("ip", "tc"):
            if shutil.which(tool) is None:
                return f"needs `{tool}` (iproute2)"
        try:
            with EmulatedLink(1, "1gbit"):
                pass
        except RuntimeError as e:
            return str(e)
        return None

    def prefix(self, host):
        """The command prefix that runs a program on `host`."""
        return ["ip", "netns", "exec", self.hosts[host]]

    def address(self, host):
        return f"{SUBNET}.{host + 1}"

    def sent_bytes(self, host):
        """Bytes `host` has sent over its link."""
        out = subprocess.run(["ip", "netns", "exec", self.hosts[host], "cat",
                              f"/sys/class/net/{INTERFACE}/statistics/tx_bytes"],
                             capture_output=True, text=True, check=True).stdout
        return int(out)

    def _shape(self, namespace, device):
        # The burst must hold a whole offloaded segment (64 KiB) or tbf
        # drops it; the queue limit is large enough that nothing is dropped
        # at these rates.
        _run("ip", "netns", "exec", namespace, "tc", "qdisc", "add", "dev", device, "root",
             "tbf", "rate", self.rate, "burst", self.burst, "limit", "64mb")

    def __enter__(self):
        try:
            _run("ip", "netns", "add", self.bridge)
            _run("ip", "-n", self.bridge, "link", "add", "br0", "type", "bridge")
            _run("ip", "-n", self.bridge, "link", "set", "br0", "up")
            for h, ns in enumerate(self.hosts):
                port = f"port{h}"
                _run("ip", "netns", "add", ns)
                _run("ip", "-n", ns, "link", "set", "lo", "up")
                _run("ip", "-n", ns, "link", "add", INTERFACE, "type", "veth", "peer", "name",
                     port, "netns", self.bridge)
                _run("ip", "-n", ns, "addr", "add", f"{self.address(h)}/24", "dev", INTERFACE)
                _run("ip", "-n", ns, "link", "set", INTERFACE, "up")
                _run("ip", "-n", self.bridge, "link", "set", port, "master", "br0")
                _run("ip", "-n", self.bridge, "link", "set", port, "up")
                self._shape(ns, INTERFACE)  # what the host sends
                self._shape(self.bridge, port)  # what it receives
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        # Deleting a namespace deletes the devices in it.
        for ns in [*self.hosts, self.bridge]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        return False
