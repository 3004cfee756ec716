"""Media adapter: ffmpeg/ffprobe behind small functions (probe, proxy, HLS, thumbnail; and the
editor outputs: CMAF, waveform, editor metadata, sprite).

Activities call `adapters.media.transcode`; `ffmpeg_tools` only locates binaries and runs them. The
editor outputs (`cmaf`, `waveform`, `editor_metadata`, `sprite`) are not called by activities yet.
"""
