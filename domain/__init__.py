"""Pure rules of each memory system, shared by agents, projectors, retrieval and the API.

The ground floor beside schemas/: modules here import only the standard library, schemas/
and memory_agent.settings, never streams/, projections/, retrieval/, api/ or the CLI.
"""
