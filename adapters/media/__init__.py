"""Media adapter: ffmpeg/ffprobe behind small functions (probe, proxy, HLS, thumbnail).

Activities call `adapters.media.transcode`; `ffmpeg_tools` only locates binaries and runs them.
"""
