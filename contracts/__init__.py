"""Contracts between the layers: the names and messages that several layers share, one module per
boundary, importing nothing of ours but config/defaults.py, so every layer above config may depend
on them (docs/architecture.md, "Where things are")."""
