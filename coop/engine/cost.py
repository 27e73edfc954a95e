"""Cost models: a device's peak compute and bandwidth, what the roofline model prices ops with
and what the engine charges for copying a byte (a move, an in-place op's copy of an old value),
and the rates of its link to host memory each way (what a copy to or from the host takes).
"""
import math
import numbers
from dataclasses import dataclass

__all__ = ["DEVICES", "DeviceSpec", "device_spec"]

#: the host link's rates, each way: optional (None: the spec models no host link)
_LINK = ("h2d_bytes_per_s", "d2h_bytes_per_s")


@dataclass(frozen=True)
class DeviceSpec:
    """Peak compute and bandwidth of a named device, for the roofline cost model, and the rates
    of its link to host memory (what an offload to the host and its copy back take)."""

    name: str
    flops_per_s: float      # fp32 peak
    bytes_per_s: float      # memory bandwidth
    launch_ns: float = 0.0  # fixed cost per kernel
    h2d_bytes_per_s: float = None   # host link, host to device (None: no link modelled)
    d2h_bytes_per_s: float = None   # host link, device to host

    def __post_init__(self):
        # a zero rate divides by zero at the first cost, a negative one is silently ignored
        # by the roofline's max: refuse both where the spec is made
        for field, positive in (("flops_per_s", True), ("bytes_per_s", True),
                                ("launch_ns", False), *((f, True) for f in _LINK)):
            value = getattr(self, field)
            if value is None and field in _LINK:
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Real) \
                    or not math.isfinite(value) or value < 0 or (positive and value == 0):
                raise ValueError(f"coop: DeviceSpec {self.name!r}: {field} must be a finite "
                                 f"number {'> 0' if positive else '>= 0'}"
                                 f"{' (or None: no host link)' if field in _LINK else ''}, "
                                 f"got {value!r}")

    @property
    def copy_ns_per_byte(self):
        """Cost of copying one byte within the device's memory, in ns: the copy reads it and
        writes it at the device's bandwidth. The engine charges it for moving a piece and weighs
        it against a recompute when an in-place op could copy an old value."""
        return 2e9 / self.bytes_per_s

    @property
    def h2d_ns_per_byte(self):
        """Time of copying one byte from host memory to the device, in ns (the host link's
        host-to-device rate)."""
        return 1e9 / self._link("h2d_bytes_per_s")

    @property
    def d2h_ns_per_byte(self):
        """Time of copying one byte from the device to host memory, in ns."""
        return 1e9 / self._link("d2h_bytes_per_s")

    @property
    def host_link(self):
        """(d2h, h2d): the ns per byte of a copy to host memory and of one back, what the
        engine's host tier prices and charges (Engine(link=...))."""
        return self.d2h_ns_per_byte, self.h2d_ns_per_byte

    def h2d_ns(self, nbytes):
        """Time of one copy of nbytes from host memory to the device, in ns."""
        return nbytes * self.h2d_ns_per_byte

    def d2h_ns(self, nbytes):
        """Time of one copy of nbytes from the device to host memory, in ns."""
        return nbytes * self.d2h_ns_per_byte

    def _link(self, field):
        rate = getattr(self, field)
        if rate is None:
            raise ValueError(f"coop: DeviceSpec {self.name!r} models no host link: give "
                             f"{field}= (bytes/s over the link, e.g. 25e9 for PCIe Gen4 x16) "
                             f"to price copies to and from the host")
        return rate

    def cost_ns(self, flops, nbytes):
        """Roofline time of a kernel doing `flops` and moving `nbytes`, in nanoseconds."""
        return self.launch_ns + 1e9 * max(flops / self.flops_per_s, nbytes / self.bytes_per_s)


# The host link (h2d, d2h bytes/s), measured-realistic rates rather than the links' theory:
# - A100 (PCIe Gen4 x16, 31.5 GB/s per direction in theory): 25 GB/s each way, what NVIDIA's
#   nvbandwidth measures on A100 SXM4 nodes with pinned memory (host to device 25.13 GB/s on an
#   A100-SXM4-40GB, NVIDIA/nvbandwidth issue 42; device to host about 25 GB/s on an
#   A100-SXM4-80GB, issue 53).
# - H100 (PCIe Gen5 x16, 63 GB/s per direction in theory): 35 GB/s host to device and
#   53 GB/s device to host, nvbandwidth's kernel-driven copies (memcpy_sm) measured on H100
#   nodes (35.2 and 52.8 GB/s, NVIDIA/nvbandwidth issue 24); the H100 PCIe card sits on the
#   same Gen5 x16 link.
# - H200 (the same Gen5 x16 link): 54.5 GB/s host to device and 54.4 GB/s device to host, what
#   benchmarks/device_check.sh measured on one (copy-engine copies of 256 MiB between pinned
#   host memory and the device on a non-blocking stream, as the host tier copies, median of 5;
#   54.8 and 54.5 GB/s in an earlier run the same day). Smaller copies pay a fixed cost the
#   model leaves out: 64 KiB moved at about 4 GB/s, 1 MiB at 30 GB/s, 16 MiB at 51 GB/s.
# - cpu: "the host" is the same memory, so a copy is a memcpy: it reads and writes each byte,
#   10 GB/s each way at its 20 GB/s bandwidth (1 / copy_ns_per_byte).
_GEN4 = dict(h2d_bytes_per_s=25e9, d2h_bytes_per_s=25e9)
_GEN5 = dict(h2d_bytes_per_s=35e9, d2h_bytes_per_s=53e9)
_H200_LINK = dict(h2d_bytes_per_s=54.5e9, d2h_bytes_per_s=54.4e9)

DEVICES = {
    # NVIDIA data sheets: fp32 (non-tensor-core) peak and HBM bandwidth
    "a100-80gb": DeviceSpec("a100-80gb", 19.5e12, 2.039e12, 0.0, **_GEN4),   # SXM4 80GB
    "a100-40gb": DeviceSpec("a100-40gb", 19.5e12, 1.555e12, 0.0, **_GEN4),   # SXM4 40GB
    "h100": DeviceSpec("h100", 67e12, 3.35e12, 0.0, **_GEN5),                # SXM5 80GB, HBM3
    "h100-pcie": DeviceSpec("h100-pcie", 51e12, 2.0e12, 0.0, **_GEN5),       # PCIe 80GB, HBM2e
    "h200": DeviceSpec("h200", 67e12, 4.8e12, 0.0, **_H200_LINK),            # SXM 141GB, HBM3e
    # a rough 2-core host, for examples that model rather than time
    "cpu": DeviceSpec("cpu", 100e9, 20e9, 0.0, h2d_bytes_per_s=10e9, d2h_bytes_per_s=10e9),
}


def device_spec(name):
    """The DEVICES entry for a device's name as the driver reports it ("NVIDIA H100 80GB HBM3",
    "NVIDIA A100-SXM4-40GB"), or None when no entry describes it (other variants included:
    an A100 80GB PCIe, an H100 NVL)."""
    words = name.lower().replace("-", " ").split()
    if "h200" in words and "nvl" not in words:
        return DEVICES["h200"]
    if "h100" in words and "nvl" not in words:
        return DEVICES["h100-pcie" if "pcie" in words else "h100"]
    if "a100" in words and "pcie" not in words:
        for size in ("80gb", "40gb"):
            if size in words:
                return DEVICES[f"a100-{size}"]
    return None
