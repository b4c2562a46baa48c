"""A local platform with simulated buyers, for the demo, tests and benchmarks."""

from transports.simulator.platform import SimulatedPlatform
from transports.simulator.transport import SimulatorTransport

__all__ = ["SimulatedPlatform", "SimulatorTransport"]
