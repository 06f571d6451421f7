"""Pure rules of each memory system, shared by agents, projectors, retrieval and the API.

One subpackage per memory system (domain/facts/, domain/topics/). The ground floor beside
schemas/: modules here import only the standard library, numpy, schemas/, core.settings
and each other, never streams/, projections/, retrieval/, api/ or the CLI.
"""
