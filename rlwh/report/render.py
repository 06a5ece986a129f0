"""Where report pages go and how they are rendered: safe file names, writes that stay
inside the output dir, the shared assets and the Jinja2 environment.

Run and role names come from the data and may be hostile, so they become file names only
through `slug`, and every write is checked to land under the output dir.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import fields
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape

from rlwh import __version__
from rlwh.assets import asset_dir
from rlwh.errors import RlwhError
from rlwh.report.context import Link, Page, now_text

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_RESERVED = {"index.html", "plotly.min.js", "report.js", "nightly.json", "memory_timeline"}  # our own files


def slug(name: str) -> str:
    """A safe file name for `name`; names that needed changing get a hash, so two never collide."""
    cleaned = _UNSAFE.sub("_", name).strip("._-")[:60]
    if cleaned == name and cleaned and cleaned.lower() not in _RESERVED:
        return cleaned
    digest = hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{cleaned or 'x'}-{digest}"


def inside(out: Path, path: Path) -> Path:
    """`path` resolved, or an error when it would land outside the report dir `out`."""
    resolved = path.resolve()
    if not resolved.is_relative_to(out.resolve()):
        raise RlwhError(f"refusing to write {path}: outside the report dir {out}")
    return resolved


def write_text(out: Path, path: Path, text: str) -> Path:
    """Write atomically (temp file renamed over it): a reader never sees half a page."""
    path = inside(out, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def write_assets(out: Path) -> None:
    """plotly.min.js (from the installed plotly package) and report.js, once per dir."""
    from plotly.offline import get_plotlyjs

    script = template_dir().joinpath("report.js").read_text(encoding="utf-8")
    for name, text in (("plotly.min.js", get_plotlyjs()), ("report.js", script)):
        target = out / name
        data = text.encode("utf-8")
        if not target.exists() or target.stat().st_size != len(data) or target.read_bytes() != data:
            write_text(out, target, text)


def template_dir() -> Path:
    return asset_dir("reports")


def path_breaks(text) -> Markup:
    """A path, escaped, that may wrap after each "/" and nowhere inside a name."""
    return Markup("/<wbr>").join(escape(part) for part in ("" if text is None else str(text)).split("/"))


_ENV: Environment | None = None


def environment() -> Environment:
    global _ENV
    if _ENV is None:
        _ENV = Environment(
            loader=FileSystemLoader(str(template_dir())),
            autoescape=select_autoescape(["html"], default=True),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            finalize=lambda value: "" if value is None else value,  # NULL shows as an empty cell
        )
        _ENV.filters["path_breaks"] = path_breaks
    return _ENV


def render_page(template: str, context: Page) -> str:
    """Render one page template with its context dataclass (its fields, shallowly)."""
    values = {f.name: getattr(context, f.name) for f in fields(context)}
    return environment().get_template(template).render(**values)


def page_base(title: str, page_dir: Path, out: Path, nav: list[tuple[str, Path]], charts: bool) -> dict:
    """The Page fields of a page in `page_dir`: links are relative, so the dir can move."""
    rel = lambda p: os.path.relpath(p, page_dir)  # noqa: E731
    return {
        "title": title, "generated_at": now_text(), "version": __version__,
        "nav": [Link(text, rel(target)) for text, target in nav],
        "plotly_src": rel(out / "plotly.min.js") if charts else None,
        "script_src": rel(out / "report.js") if charts else None,
    }
