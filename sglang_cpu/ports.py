"""Ports for test servers that no other socket on this machine can take (tests and example only).

Two things take ports behind a test's back. The kernel hands its ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``) to every ``bind(0)`` and ``connect()``, so a port found free by
binding port 0 and releasing it can be anyone's a moment later. SGLang picks its NCCL / dist-init port at random
in ``SGLANG_RANDOM_PORTS`` when ``--nccl-port`` is unset. Ports here come from outside both, in blocks of
``BLOCK_SIZE``; a block is held by an exclusive ``flock`` on a file in ``lock_dir()``, which every process that
allocates through this module respects and which the kernel drops when its holder dies.

    block = allocate_block()          # held until block.release() (or the process ends)
    block.http, block.nccl            # --port, --nccl-port
    block.dist_init                   # --dist-init-addr 127.0.0.1:PORT (SGLang's DP-attention ZMQ ports follow it)
    block.extra(0)                    # anything else the test hands out: Prometheus, the probe's exporter
"""

import fcntl
import os
import random
import socket
import tempfile

# SGLang's DP attention derives its ZMQ ports from --port + 233 .. + 239 (server_args.ZMQ_TCP_PORT_DELTA) and from
# the dist-init port + 1 .. + 6: a block this size holds all of them.
BLOCK_SIZE = 256
LOWEST_PORT = 10000  # below: well-known and registered services
HIGHEST_PORT = 65535
SGLANG_RANDOM_PORTS = (22000, 29999)  # utils/network.get_free_port_below_ephemeral's default range
EXTRA_OFFSET = 16  # block.extra(i) = base + 16 + i
EXTRA_COUNT = 200  # stays below the DP-attention ports at base + 233
DEFAULT_EPHEMERAL = (32768, 60999)


class PortsExhausted(RuntimeError):
    """Every block outside the reserved ranges is held or has a port in use."""


def lock_dir():
    """Where the block locks live: one directory for every test process on this machine."""
    return os.environ.get("SGLANG_CPU_PORT_LOCK_DIR") or os.path.join(tempfile.gettempdir(), "sglang-cpu-ports")


def ephemeral_range(path="/proc/sys/net/ipv4/ip_local_port_range"):
    """(low, high) of the kernel's ephemeral ports; Linux's default where the file cannot be read."""
    try:
        with open(path) as handle:
            low, high = (int(part) for part in handle.read().split()[:2])
        return low, high
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL


def reserved_ranges():
    """The inclusive ranges a block must not touch: the kernel's ephemeral ports and SGLang's random picks."""
    return [ephemeral_range(), SGLANG_RANDOM_PORTS]


def block_bases(reserved=None):
    """Every block start whose BLOCK_SIZE ports lie in [LOWEST_PORT, HIGHEST_PORT] and outside `reserved`."""
    reserved = reserved_ranges() if reserved is None else reserved
    bases = []
    base = LOWEST_PORT
    while base + BLOCK_SIZE - 1 <= HIGHEST_PORT:
        last = base + BLOCK_SIZE - 1
        clash = next((high for low, high in reserved if base <= high and low <= last), None)
        if clash is None:
            bases.append(base)
            base += BLOCK_SIZE
        else:
            base = clash + 1
    return bases


def _bindable(port):
    # 0.0.0.0 without SO_REUSEADDR: stricter than any of the servers' own binds, so a port that passes is free for
    # every one of them (loopback HTTP, the TCPStore on all interfaces, ZMQ).
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


class PortBlock:
    """BLOCK_SIZE consecutive ports held through a lock file until release()."""

    def __init__(self, base, lock_fd, lock_path):
        self.base = base
        self._lock_fd = lock_fd
        self.lock_path = lock_path

    @property
    def http(self):
        return self.base

    @property
    def nccl(self):
        return self.base + 1

    @property
    def dist_init(self):
        return self.base + 2

    def extra(self, index):
        if not 0 <= index < EXTRA_COUNT:
            raise ValueError(f"extra port index {index} outside 0..{EXTRA_COUNT - 1}")
        return self.base + EXTRA_OFFSET + index

    @property
    def held(self):
        return self._lock_fd is not None

    def release(self):
        """Drop the lock (safe to call twice); the ports are free for the next allocation."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor drops its flock
            self._lock_fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False

    def __repr__(self):
        return f"PortBlock({self.base}..{self.base + BLOCK_SIZE - 1}{'' if self.held else ', released'})"


def _try_lock(base):
    directory = lock_dir()
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"block-{base}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return PortBlock(base, fd, path)


def allocate_block(rng=None):
    """Lock a block whose every port binds now. Blocks are tried in random order, so concurrent processes rarely
    contend for one lock; a held block is skipped without waiting."""
    bases = block_bases()
    (rng or random.Random()).shuffle(bases)
    for base in bases:
        block = _try_lock(base)
        if block is None:
            continue
        if all(_bindable(port) for port in range(base, base + BLOCK_SIZE)):
            return block
        block.release()
    low, high = ephemeral_range()
    raise PortsExhausted(f"no free block of {BLOCK_SIZE} ports in {LOWEST_PORT}-{HIGHEST_PORT} outside the "
                         f"ephemeral range {low}-{high} and SGLang's random range "
                         f"{SGLANG_RANDOM_PORTS[0]}-{SGLANG_RANDOM_PORTS[1]} (locks in {lock_dir()})")


_process_blocks = []


def process_port():
    """One port held for the rest of this process (e.g. an in-process torch.distributed store)."""
    block = allocate_block()
    _process_blocks.append(block)
    return block.http
