"""The ingest pipeline: discover -> sniff -> plan -> parse (in executors) -> load or build -> derive.

runner is `rlwh ingest`; check is `rlwh check`, the same discovery without writing.

This package is also the Python API's `rlwh.ingest(profile_dir, db=..., run=...)`: a
subpackage is set as an attribute of its parent once imported, so the name can only be
both if the package itself can be called (rlwh.api.ingest does the work).
"""

import sys as _sys
import types as _types


class _CallablePackage(_types.ModuleType):
    def __call__(self, profile_dir, db=None, run=None, *, workers=None, config=None, role=None):
        """Load `profile_dir` into the warehouse `db` as run `run` (default: the folder's
        name) and return the summary; see rlwh.api.ingest."""
        from rlwh.config import settings_for
        from rlwh.ingest.runner import ingest

        return ingest(profile_dir, settings_for(db, config, workers), run=run, role=role)


_sys.modules[__name__].__class__ = _CallablePackage
