"""Provider adapters by name. Each module hides one outside video provider.

`build_providers` builds the emulator adapter and every hosted provider, configured or not: an
unconfigured one is listed by `reelqueue providers`, and a task routed to it ends INVALID naming
the variable to set (validate_task reads `missing_setting`).
"""

from __future__ import annotations

from adapters.providers.base import VideoProvider
from adapters.providers.fal import FalProvider
from adapters.providers.http import EMULATED_API_KEY, HttpProvider, ProviderConfig
from adapters.providers.kling import KlingProvider
from adapters.providers.luma import LumaProvider
from adapters.providers.replicate import ReplicateProvider
from adapters.providers.runway import RunwayProvider

HOSTED: dict[str, type[HttpProvider]] = {
    cls.name: cls for cls in (RunwayProvider, ReplicateProvider, KlingProvider, LumaProvider, FalProvider)
}


def provider_config(settings, cls: type[HttpProvider]) -> ProviderConfig:  # noqa: ANN001 - config.Settings
    """REELQUEUE_<NAME>_* for one provider; under `emulate_providers` a provider whose base URL is
    not set points at the emulator's dialect (with a dev key unless one is configured)."""
    name = cls.name
    base_url = getattr(settings, f"{name}_base_url")
    key = getattr(settings, f"{name}_api_key")
    extra = getattr(settings, f"{name}_secret_key", "")
    webhook_secret = getattr(settings, f"{name}_webhook_secret", "")
    emulated = settings.emulate_providers and not base_url
    if emulated:
        base_url = f"{settings.emulator_url.rstrip('/')}/{cls.emulator_prefix}"
        key, extra = key or EMULATED_API_KEY, extra or EMULATED_API_KEY
        webhook_secret = webhook_secret or settings.emulator_webhook_secret
    return ProviderConfig(
        name=name, api_key=key, base_url=base_url or cls.default_base_url, emulated=emulated,
        prices=getattr(settings, f"{name}_prices"), webhook_secret=webhook_secret, extra_secret=extra,
        submit_timeout_s=settings.provider_submit_timeout_s,
    )


def build_providers(settings) -> dict[str, VideoProvider]:  # noqa: ANN001 - config.Settings
    from adapters.providers.emulator import EmulatorProvider

    # The submit timeout stays under the submit activity's 30 s start-to-close, so a lost answer is
    # seen by the adapter (UNKNOWN) rather than by Temporal's timeout (which ends the same way).
    emulator = EmulatorProvider(settings.emulator_url, settings.emulator_api_key,
                                submit_timeout_s=settings.provider_submit_timeout_s,
                                webhook_secret=settings.emulator_webhook_secret)
    providers: dict[str, VideoProvider] = {emulator.name: emulator}
    for name, cls in HOSTED.items():
        providers[name] = cls(provider_config(settings, cls))
    return providers
