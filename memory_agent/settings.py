"""Public alias of `core.settings` for SDK users (`from memory_agent.settings import get_settings`)."""

from core.settings import *  # noqa: F401,F403
from core.settings import Settings, get_settings  # noqa: F401
