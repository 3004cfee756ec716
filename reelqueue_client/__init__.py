"""A small typed client of reelqueue's tenant API (/v1), on httpx: the API's own tests use it.

    with ReelqueueClient("http://127.0.0.1:8000", api_key) as api:
        gen = api.create_generation(GenerationRequest(prompt="...", image_asset_id=asset_id),
                                    idempotency_key="order-1234")
        print(api.get_generation(gen.id).status)

Every refusal raises ApiProblem with the server's problem+json fields (`type`, `status`, `detail`).
"""

from __future__ import annotations

from reelqueue_client.client import (
    Account,
    ApiProblem,
    Generation,
    GenerationAsset,
    GenerationPage,
    GenerationRequest,
    ReelqueueClient,
)

__all__ = ["Account", "ApiProblem", "Generation", "GenerationAsset", "GenerationPage", "GenerationRequest",
           "ReelqueueClient"]
