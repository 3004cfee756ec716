"""Media cost of one task on a provider-sized clip (on demand: `python -m bench.media_cost`).

The pipeline benchmark renders 1-s `fast` clips, whose ffmpeg cost says little about a real
provider's output. This makes one clip like a provider's (H.264 + AAC, `--seconds` long, `--size`
WxH, about `--mbps` Mbit/s) with ffmpeg's test sources, then runs the media queue's steps on it
the way the activities do (probe, proxy, HLS, thumbnail, the review checks) with the worker's
ffmpeg limits, and prints one JSON object: CPU seconds (ffmpeg/ffprobe children) and wall seconds
per step, their total, and CPU seconds per second of video, the figure docs/deploy.md's capacity
model scales by. The editor outputs (CMAF, waveform, editor metadata, sprite; not yet steps of the
workflow) are measured on the proxy too, each on its own, under `editor_steps`, with their total
(children and this process: the waveform's min/max run in Python) beside the pipeline's. Nothing
here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import machine


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def make_clip(path: Path, seconds: float, size: str, mbps: float) -> None:
    from adapters.media.ffmpeg_tools import ffmpeg_path

    subprocess.run([ffmpeg_path(), "-v", "error", "-y", "-f", "lavfi", "-i", f"testsrc2=s={size}:r=24:d={seconds}",
                    "-f", "lavfi", "-i", f"sine=f=440:d={seconds}", "-c:v", "libx264", "-preset", "veryfast",
                    "-b:v", f"{mbps}M", "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", str(path)], check=True)


def timed(steps: dict[str, dict[str, float]], name: str, run: Callable[[], Any]) -> Any:
    """Run one step: `cpu_s` of its ffmpeg/ffprobe children, `own_cpu_s` of this process (the
    waveform's min/max; otherwise only the supervision), `wall_s`."""
    cpu, own, wall = children_cpu(), time.process_time(), time.perf_counter()
    out = run()
    steps[name] = {"cpu_s": round(children_cpu() - cpu, 3), "own_cpu_s": round(time.process_time() - own, 3),
                   "wall_s": round(time.perf_counter() - wall, 3)}
    return out


def measure(args: argparse.Namespace) -> dict:
    from adapters.media.checks import Expectations, check_video
    from adapters.media.ffmpeg_tools import MediaLimits
    from adapters.media.transcode import RunOptions, make_hls, make_proxy, make_thumbnail, probe
    from config.settings import Settings

    settings = Settings()
    options = RunOptions(limits=MediaLimits(threads=settings.media_threads, nice=settings.media_nice,
                                            max_memory_mb=settings.media_max_memory_mb))
    steps: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="rq-media-cost-") as tmp:
        work = Path(tmp)
        make_clip(work / "raw.mp4", args.seconds, args.size, args.mbps)
        raw_mb = (work / "raw.mp4").stat().st_size / 1e6
        source = timed(steps, "probe", lambda: probe(work / "raw.mp4", options.limits))
        proxy = timed(steps, "proxy", lambda: make_proxy(work / "raw.mp4", work / "main.mp4", args.ratio,
                                                         options=options, source=source))
        timed(steps, "hls", lambda: make_hls(work / "main.mp4", work / "hls", options=options, info=proxy))
        timed(steps, "thumbnail", lambda: make_thumbnail(work / "main.mp4", work / "thumb.jpg", options=options,
                                                         info=proxy))
        timed(steps, "checks", lambda: check_video(work / "main.mp4", Expectations(
            duration_s=args.seconds, aspect_ratio=args.ratio, duration_tolerance_s=0.5, audio_expected=True,
            max_black_ratio=0.3, max_frozen_ratio=0.5)))
        editor = editor_steps(work, options)
    cpu = sum(s["cpu_s"] for s in steps.values())
    return {"clip": {"seconds": args.seconds, "size": args.size, "mbps": args.mbps, "mb": round(raw_mb, 1),
                     "ratio": args.ratio},
            "steps": steps, "cpu_s": round(cpu, 3), "wall_s": round(sum(s["wall_s"] for s in steps.values()), 3),
            "cpu_s_per_video_s": round(cpu / args.seconds, 3),
            "editor_steps": editor, "editor_cpu_s": round(sum(s["cpu_s"] + s["own_cpu_s"] for s in editor.values()), 3),
            "media_threads": settings.media_threads, "machine": machine()}


def editor_steps(work: Path, options: Any) -> dict[str, dict[str, float]]:
    """CPU and wall seconds of each editor output made from the proxy `work/main.mp4`."""
    from adapters.media.cmaf import make_cmaf
    from adapters.media.editor_metadata import read_editor_metadata
    from adapters.media.sprite import make_sprite
    from adapters.media.waveform import make_waveform

    proxy = work / "main.mp4"
    steps: dict[str, dict[str, float]] = {}
    cmaf = timed(steps, "cmaf", lambda: make_cmaf(proxy, work / "cmaf", options=options))
    steps["cmaf"]["copied"] = cmaf.copied
    timed(steps, "waveform", lambda: make_waveform(proxy, work / "waveform.json", work / "waveform.dat",
                                                   options=options))
    timed(steps, "editor_metadata", lambda: read_editor_metadata(proxy, options=options))
    timed(steps, "sprite", lambda: make_sprite(proxy, work / "sprite.jpg", work / "sprite.vtt", options=options))
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="clip length")
    parser.add_argument("--size", default="1080x1920", help="the provider's frame, WxH")
    parser.add_argument("--mbps", type=float, default=8.0, help="video bitrate (8 Mbit/s x 10 s = 10 MB)")
    parser.add_argument("--ratio", default="9:16", help="the task's aspect ratio (the proxy's frame)")
    print(json.dumps(measure(parser.parse_args()), indent=2))


if __name__ == "__main__":
    main()
