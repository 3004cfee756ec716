"""The provider emulator: a real HTTP video provider that renders real MP4s with ffmpeg.

It behaves like the hosted providers in the ways that hurt (no idempotency on submit, expiring
output URLs, async jobs, webhooks, injectable faults) so the pipeline is tested against them.
`emulator.app.create_app` builds the FastAPI app; `python -m emulator` serves it (README.md).
Kept import-light: the provider adapter imports `emulator.wire` without FastAPI.
"""
