"""Files on disk and figures: checkpoints (one msgpack file, no pickle) and the atomic
writes every file goes through (``checkpoint``), the workdir a run lives in (``workdir``),
and the drawing primitives every figure shares (``plots``)."""
