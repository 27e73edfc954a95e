"""Cost models: a device's peak compute and bandwidth, what the roofline model prices ops with
and what the engine charges for copying a byte (a move, an in-place op's copy of an old value).
"""
from dataclasses import dataclass

__all__ = ["DEVICES", "DeviceSpec", "device_spec"]


@dataclass(frozen=True)
class DeviceSpec:
    """Peak compute and bandwidth of a named device, for the roofline cost model."""

    name: str
    flops_per_s: float      # fp32 peak
    bytes_per_s: float      # memory bandwidth
    launch_ns: float = 0.0  # fixed cost per kernel

    @property
    def copy_ns_per_byte(self):
        """Cost of copying one byte within the device's memory, in ns: the copy reads it and
        writes it at the device's bandwidth. The engine charges it for moving a piece and weighs
        it against a recompute when an in-place op could copy an old value."""
        return 2e9 / self.bytes_per_s

    def cost_ns(self, flops, nbytes):
        """Roofline time of a kernel doing `flops` and moving `nbytes`, in nanoseconds."""
        return self.launch_ns + 1e9 * max(flops / self.flops_per_s, nbytes / self.bytes_per_s)


DEVICES = {
    # NVIDIA data sheets: fp32 (non-tensor-core) peak and HBM bandwidth
    "a100-80gb": DeviceSpec("a100-80gb", 19.5e12, 2.039e12, 0.0),   # SXM4 80GB
    "a100-40gb": DeviceSpec("a100-40gb", 19.5e12, 1.555e12, 0.0),   # SXM4 40GB
    "h100": DeviceSpec("h100", 67e12, 3.35e12, 0.0),                # SXM5 80GB, HBM3
    "h100-pcie": DeviceSpec("h100-pcie", 51e12, 2.0e12, 0.0),       # PCIe 80GB, HBM2e
    "h200": DeviceSpec("h200", 67e12, 4.8e12, 0.0),                 # SXM 141GB, HBM3e
    # a rough 2-core host, for examples that model rather than time
    "cpu": DeviceSpec("cpu", 100e9, 20e9, 0.0),
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
