"""Provider adapters by name. Each module hides one outside video provider."""

from __future__ import annotations

from adapters.providers.base import VideoProvider


def build_providers(settings) -> dict[str, VideoProvider]:  # noqa: ANN001 - config.Settings
    from adapters.providers.emulator import EmulatorProvider

    emulator = EmulatorProvider(settings.emulator_url, settings.emulator_api_key)
    return {emulator.name: emulator}
