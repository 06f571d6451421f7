"""Public alias of `runtime.client` for SDK users (`from memory_agent.client import MemoryClient`)."""

from runtime.client import *  # noqa: F401,F403
from runtime.client import MemoryClient  # noqa: F401
