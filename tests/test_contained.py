"""What a writer publishes holds no way out: no link under a folder it publishes
(safe_files.check_contained), no manifest path that climbs out of a generation."""

from __future__ import annotations

import os

import pytest

from rlwh.errors import RlwhError
from rlwh.parquet.dataset import _inside, file_path
from rlwh.safe_files import check_contained


def _tree(root):
    (root / "cpu_ops" / "run=a").mkdir(parents=True)
    (root / "cpu_ops" / "run=a" / "g.parquet").write_bytes(b"x")
    return root


def test_a_plain_tree_is_contained(tmp_path):
    check_contained(_tree(tmp_path / "gen"), "dataset")


@pytest.mark.parametrize("link", ["file", "folder", "dangling"])
def test_any_link_under_the_folder_is_refused(tmp_path, link):
    root = _tree(tmp_path / "gen")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("x")
    where = root / "cpu_ops" / "run=a" / "sneaky"
    target = {"file": outside / "secret", "folder": outside, "dangling": tmp_path / "nowhere"}[link]
    os.symlink(target, where)
    with pytest.raises(RlwhError, match="dataset refused: .*sneaky"):
        check_contained(root, "dataset")


@pytest.mark.parametrize("rel", ["../x.parquet", "/etc/passwd", "a/../../x", "a/./b", "a//b", ""])
def test_a_manifest_path_that_climbs_out_is_refused(tmp_path, rel):
    with pytest.raises(RlwhError, match="would lie outside"):
        _inside(tmp_path, rel)


def test_a_manifest_path_inside_is_joined(tmp_path):
    assert _inside(tmp_path, "cpu_ops/run=a%2Fb/g.parquet") == tmp_path / "cpu_ops" / "run=a%2Fb" / "g.parquet"


@pytest.mark.parametrize("rel", ["cpu_ops/run=a/g.parquet", "current/cpu_ops/g.parquet", "gen-000001",
                                 "gen-1/cpu_ops/g.parquet", "gen-000001/../../x", "/gen-000001/x"])
def test_a_manifest_path_outside_a_generation_is_refused(tmp_path, rel):
    with pytest.raises(RlwhError, match="dataset refused"):
        file_path(tmp_path, rel)


def test_a_manifest_path_in_a_generation_is_joined(tmp_path):
    assert file_path(tmp_path, "gen-000007/cpu_ops/g.parquet") == str(tmp_path / "gen-000007" / "cpu_ops" / "g.parquet")
