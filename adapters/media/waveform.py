"""An audio waveform for editors and players, in the audiowaveform data format version 2 (the
format peaks.js and waveform-data read): JSON and binary `.dat`.

Both hold, per channel and per window of `samples_per_pixel` samples, the window's minimum and
maximum, interleaved by channel: `[min_c0, max_c0, min_c1, max_c1, ...]` per pixel. The `.dat` is
a 24-byte little-endian header (version int32 = 2, flags uint32 with bit 0 set for 8-bit values,
sample_rate int32, samples_per_pixel int32, length uint32 = pixels, channels int32) and then the
values as int8 or int16.

Choices:
- 48 kHz and `samples_per_pixel` 256: 187.5 pixels a second, about 7.5 per frame at 25 fps, so an
  editor can trim to the frame by the waveform. Readers can only merge windows (resample to coarser
  scales), never split them, so the stored scale is the finest one offered.
- 8-bit values: 256 levels are more than the pixels of an editor's waveform lane and half the size
  of 16-bit (`bits=16` is offered).
- Mono stays mono; stereo and more are mixed down to two channels (a lane per channel is what
  editors draw).
- ffmpeg writes signed 16-bit PCM to a temporary file next to the output, which is read a block at
  a time: a long clip is never held whole in memory.
- A video without audio gets a stated empty waveform: one channel, `length` 0, no data.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import tempfile
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Literal

import ffmpeg
from pydantic import BaseModel

from adapters.media.ffmpeg_tools import MediaError, atomic_output
from adapters.media.source_streams import read_source
from adapters.media.transcode import MediaInfo, PathLike, RunOptions

WAVEFORM_VERSION = 2
SAMPLE_RATE = 48_000
SAMPLES_PER_PIXEL = 256
_HEADER = struct.Struct("<iIiiIi")  # version, flags, sample_rate, samples_per_pixel, length, channels
_FLAG_8_BIT = 1
_PIXELS_PER_READ = 1024


class Waveform(BaseModel):
    """One waveform: `data` holds `length` x `channels` (min, max) pairs, interleaved by channel."""

    version: Literal[2] = WAVEFORM_VERSION
    channels: int
    sample_rate: int
    samples_per_pixel: int
    bits: Literal[8, 16]
    length: int
    data: list[int]

    def to_json(self) -> str:
        return json.dumps(self.model_dump(), separators=(",", ":"))

    def to_dat(self) -> bytes:
        flags = _FLAG_8_BIT if self.bits == 8 else 0
        header = _HEADER.pack(self.version, flags, self.sample_rate, self.samples_per_pixel, self.length,
                              self.channels)
        values = array("b" if self.bits == 8 else "h", self.data)
        if sys.byteorder == "big":
            values.byteswap()
        return header + values.tobytes()

    @classmethod
    def from_dat(cls, blob: bytes) -> Waveform:
        """Read a `.dat` back (as a player would); MediaError when its size disagrees with its header."""
        version, flags, rate, spp, length, channels = _HEADER.unpack_from(blob)
        bits = 8 if flags & _FLAG_8_BIT else 16
        values = array("b" if bits == 8 else "h")
        values.frombytes(blob[_HEADER.size:])
        if sys.byteorder == "big":
            values.byteswap()
        if len(values) != length * channels * 2:
            raise MediaError(f"waveform .dat holds {len(values)} values, its header says {length} x {channels} x 2")
        return cls(version=version, channels=channels, sample_rate=rate, samples_per_pixel=spp, bits=bits,
                   length=length, data=values.tolist())


class WaveformOutput(BaseModel):
    json_path: Path
    dat_path: Path
    waveform_length: int
    channels: int


def empty_waveform(bits: Literal[8, 16] = 8) -> Waveform:
    """The waveform of a video without audio: one channel, no pixels."""
    return Waveform(channels=1, sample_rate=SAMPLE_RATE, samples_per_pixel=SAMPLES_PER_PIXEL, bits=bits, length=0,
                    data=[])


def peaks(pcm: BinaryIO, channels: int, *, samples_per_pixel: int = SAMPLES_PER_PIXEL,
          bits: Literal[8, 16] = 8) -> Iterator[int]:
    """Min and max per window and channel of interleaved s16le PCM read from `pcm` block by block;
    the last window may be shorter. 8-bit values are the 16-bit ones shifted right by 8."""
    shift = 8 if bits == 8 else 0
    frame = samples_per_pixel * channels
    while block := pcm.read(frame * 2 * _PIXELS_PER_READ):
        samples = array("h")
        samples.frombytes(block[: len(block) - len(block) % 2])
        if sys.byteorder == "big":
            samples.byteswap()
        for start in range(0, len(samples), frame):
            window = samples[start:start + frame]
            for channel in range(channels):
                values = window[channel::channels]
                if values:
                    yield min(values) >> shift
                    yield max(values) >> shift


def make_waveform(src: PathLike, json_dst: PathLike, dat_dst: PathLike, *, bits: Literal[8, 16] = 8,
                  options: RunOptions | None = None) -> WaveformOutput:
    """Write the waveform of `src`'s first audio track as JSON and `.dat` (each replaced only on
    success); the stated empty waveform when it has none. MediaError when ffmpeg fails."""
    options = options or RunOptions()
    source = read_source(src, options.limits)
    if source.audio is None:
        waveform = empty_waveform(bits)
    else:
        channels = min(2, int(source.audio.get("channels") or 1))
        waveform = _measure(src, channels, bits, options, source.info, Path(dat_dst).parent)
    with atomic_output(json_dst) as tmp_json, atomic_output(dat_dst) as tmp_dat:
        tmp_json.write_text(waveform.to_json())
        tmp_dat.write_bytes(waveform.to_dat())
    return WaveformOutput(json_path=Path(json_dst), dat_path=Path(dat_dst), waveform_length=waveform.length,
                          channels=waveform.channels)


def _measure(src: PathLike, channels: int, bits: Literal[8, 16], options: RunOptions, info: MediaInfo,
             work_dir: Path) -> Waveform:
    work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=work_dir, prefix=".pcm-", suffix=".raw") as pcm:
        out = ffmpeg.input(os.fspath(src)).audio.output(pcm.name, f="s16le", acodec="pcm_s16le", ac=channels,
                                                        ar=SAMPLE_RATE)
        options.run(out, f"waveform of {src}", info)
        with open(pcm.name, "rb") as reader:
            data = list(peaks(reader, channels, bits=bits))
    return Waveform(channels=channels, sample_rate=SAMPLE_RATE, samples_per_pixel=SAMPLES_PER_PIXEL, bits=bits,
                    length=len(data) // (2 * channels), data=data)
