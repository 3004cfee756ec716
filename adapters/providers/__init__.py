"""Provider adapters by name. Each module hides one outside video provider."""

from __future__ import annotations

from adapters.providers.base import VideoProvider


def build_providers(settings) -> dict[str, VideoProvider]:  # noqa: ANN001 - config.Settings
    from adapters.providers.emulator import EmulatorProvider

    # The submit timeout stays under the submit activity's 30 s start-to-close, so a lost answer is
    # seen by the adapter (UNKNOWN) rather than by Temporal's timeout (which ends the same way).
    emulator = EmulatorProvider(settings.emulator_url, settings.emulator_api_key, submit_timeout_s=20.0,
                                webhook_secret=settings.emulator_webhook_secret)
    return {emulator.name: emulator}
