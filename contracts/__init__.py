"""Contracts between the layers: names and messages that several layers share, importing nothing of
ours, so every layer may depend on them (docs/architecture.md, "Where things are")."""
