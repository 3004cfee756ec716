"""The emulator's routes, one router per concern: the provider-style `/v1/jobs` API (jobs.py), the
signed output files (files.py) and the `/_sim` test hooks (sim.py). The dialects' routes live with
their dialects (emulator/dialects/)."""
