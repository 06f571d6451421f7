"""The ground floor: settings, metrics, model ports and adapters, the sealing codec.

Imports only the standard library, third-party packages and `schemas/`."""
