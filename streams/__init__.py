"""Faust stream agents: thin shells around pure folds."""
