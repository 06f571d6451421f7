"""Versioned event contracts: envelope, payloads, upcasters, codec and JSON Schema export."""

from schemas.envelope import Envelope, InvalidEvent, conversation_key
from schemas.codec import decode, encode
from schemas.registry import REGISTRY
from schemas.spec import EventSpec

__all__ = ["Envelope", "EventSpec", "InvalidEvent", "REGISTRY", "conversation_key", "decode", "encode"]
